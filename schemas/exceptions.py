"""Errors raised by the ``schemas`` package: one class per stable code."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from schemas.errors import GaplessError


class CodecErrorCode(StrEnum):
    """Why bytes could not become an event (or an event could not become bytes)."""

    BAD_MAGIC = "BAD_MAGIC"
    """The message starts with neither the single-object marker ``C3 01`` nor the
    Confluent framing's ``00``."""
    TRUNCATED = "TRUNCATED"
    """The message ends before its header does (10 bytes single-object, 5 Confluent)."""
    UNKNOWN_SCHEMA = "UNKNOWN_SCHEMA"
    """The writer fingerprint names no current or released schema of this kind."""
    MALFORMED_BODY = "MALFORMED_BODY"
    """The body does not decode under its writer schema, or decodes to an invalid event."""
    UNENCODABLE = "UNENCODABLE"
    """The event holds a value its schema cannot carry (e.g. a position beyond 64 bits)."""
    UNKNOWN_SCHEMA_ID = "UNKNOWN_SCHEMA_ID"
    """A Confluent-framed message names a schema id the registry does not know."""
    REGISTRY_UNAVAILABLE = "REGISTRY_UNAVAILABLE"
    """The schema registry did not answer (down, unreachable, a 5xx): retry later."""
    REGISTRY_NOT_CONFIGURED = "REGISTRY_NOT_CONFIGURED"
    """A Confluent-framed message reached a process without ``GAPLESS_SCHEMA_REGISTRY_URL``."""
    INCOMPATIBLE_SCHEMA = "INCOMPATIBLE_SCHEMA"
    """The registry refused the writer's schema as incompatible with its subject's."""


class CodecError(GaplessError):
    """A message that cannot be encoded or decoded; catch this to catch them all.

    ``code`` (a ``CodecErrorCode``) is stable and safe to branch on, count in metrics,
    or store with a quarantined message; ``message`` is for people.
    """

    code: ClassVar[str] = "CODEC_ERROR"
    retryable: ClassVar[bool] = False
    """True when the same bytes may decode later (the registry was unavailable): a
    reader retries them instead of setting them aside."""

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


class UnknownSchemaId(CodecError):
    code = CodecErrorCode.UNKNOWN_SCHEMA_ID


class RegistryUnavailable(CodecError):
    code = CodecErrorCode.REGISTRY_UNAVAILABLE
    http_status = 503
    retryable = True


class RegistryNotConfigured(RegistryUnavailable):
    """Retryable too: the bytes are good, the process lacks its setting."""

    code = CodecErrorCode.REGISTRY_NOT_CONFIGURED


class IncompatibleSchema(CodecError):
    code = CodecErrorCode.INCOMPATIBLE_SCHEMA

    def __init__(self, subject: str, message: str) -> None:
        super().__init__(message)
        self.subject = subject
