"""Errors raised by the ``schemas`` package, each with a stable machine-readable code."""

from __future__ import annotations

from enum import StrEnum


class CodecErrorCode(StrEnum):
    """Why bytes could not become an event (or an event could not become bytes)."""

    BAD_MAGIC = "BAD_MAGIC"
    """The message does not start with the single-object marker ``C3 01``."""
    TRUNCATED = "TRUNCATED"
    """The message ends before the 10-byte single-object header does."""
    UNKNOWN_SCHEMA = "UNKNOWN_SCHEMA"
    """The writer fingerprint names no current or released schema of this kind."""
    MALFORMED_BODY = "MALFORMED_BODY"
    """The body does not decode under its writer schema, or decodes to an invalid event."""
    UNENCODABLE = "UNENCODABLE"
    """The event holds a value its schema cannot carry (e.g. a position beyond 64 bits)."""


class CodecError(Exception):
    """A message that cannot be encoded or decoded.

    ``code`` is stable and safe to branch on, count in metrics, or store with a
    quarantined message; ``message`` is for people.
    """

    def __init__(self, code: CodecErrorCode, message: str) -> None:
        # Both go to ``args`` so the error pickles and crosses process boundaries intact.
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"
