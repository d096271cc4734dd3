"""Errors raised by the ``schemas`` package: one class per stable code."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from schemas.errors import GaplessError


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


class CodecError(GaplessError):
    """A message that cannot be encoded or decoded; catch this to catch them all.

    ``code`` (a ``CodecErrorCode``) is stable and safe to branch on, count in metrics,
    or store with a quarantined message; ``message`` is for people.
    """

    code: ClassVar[str] = "CODEC_ERROR"

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class BadMagic(CodecError):
    code = CodecErrorCode.BAD_MAGIC


class Truncated(CodecError):
    code = CodecErrorCode.TRUNCATED


class UnknownSchema(CodecError):
    code = CodecErrorCode.UNKNOWN_SCHEMA


class MalformedBody(CodecError):
    code = CodecErrorCode.MALFORMED_BODY


class Unencodable(CodecError):
    code = CodecErrorCode.UNENCODABLE
