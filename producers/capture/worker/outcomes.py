"""What became of a job or a product, and why: classified failures and the one way an
error is turned into something stored and shown to operators.

A failure is *terminal* when trying again cannot change the answer (the same bytes
through the same parser, a domain rule refusing the same facts) and *retryable*
otherwise (a database or object store unavailable, a lost race, an unexpected bug
that may be transient). Retryable failures are retried with backoff until their
budget runs out; then the product (or job) is left ``failed``, visible to operators
with its code and a sanitized message, until it is retried or skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import psycopg
import psycopg.errors

from producers.capture.exceptions import AdapterError, Failure
from producers.resolver.exceptions import DomainError
from schemas.exceptions import IncompatibleSchema, RegistryUnavailable

MAX_ERROR_CHARS = 500


class RunAborted(Exception):
    """The run stops without recording anything more: a product's outcome could not
    be written (the database is gone). Its checkpoint holds; the job's claim expires
    and a later run replays from the checkpoint."""


JOB_GONE = "JOB_GONE"
"""The stored code of a job the resolver database does not hold (``unknown_job``): its
capture expired, or the database was restored to before it was accepted."""

# Domain refusals caused by a concurrent writer rather than by the facts themselves.
RETRYABLE_DOMAIN_CODES = frozenset({"IDENTITY_CONFLICT", "GENERATION_CONFLICT"})


@dataclass(frozen=True, slots=True)
class Classified:
    code: str
    retryable: bool
    message: str  # sanitized


def classify(exc: BaseException) -> Classified:
    """The stored form of ``exc``: code, retryability, sanitized message."""
    if isinstance(exc, Failure):
        return Classified(exc.code, exc.retryable, sanitize(exc.message))
    if isinstance(exc, AdapterError):
        # The capture as a whole: the same bytes through the same parser answer the same.
        return Classified(exc.code, False, sanitize(exc.message))
    if isinstance(exc, DomainError):
        return Classified(exc.code, exc.code in RETRYABLE_DOMAIN_CODES, sanitize(exc.message))
    if isinstance(exc, RegistryUnavailable | IncompatibleSchema):
        # The schema registry's answer, under its own code; retried within the budget
        # (the registry back, or its subject's history mended, the write goes through).
        return Classified(exc.code, True, sanitize(exc.message))
    text = sanitize(f"{type(exc).__name__}: {exc}")
    if isinstance(
        exc,
        psycopg.errors.SerializationFailure
        | psycopg.errors.DeadlockDetected
        | psycopg.errors.LockNotAvailable,
    ):
        return Classified("DB_CONFLICT", True, text)
    if isinstance(exc, psycopg.OperationalError):
        return Classified("DB_UNAVAILABLE", True, text)
    if isinstance(exc, psycopg.IntegrityError):
        return Classified("DB_INTEGRITY", True, text)
    return Classified("INTERNAL_ERROR", True, text)


_SECRETS = (
    # credentials inside URLs: scheme://user:password@host
    (re.compile(r"(\b[a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@", re.I), r"\1***@"),
    # key=value, key: value and "key": "value" pairs whose key names a secret
    (
        re.compile(
            r"(?<![a-z0-9])([a-z_-]*(?:password|passwd|pwd|secret|token|access[_-]?key"
            r"|api[_-]?key|authorization|signature|credential)[a-z_-]*)"
            r"(\"?\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|\S+)",
            re.I,
        ),
        r"\1\2***",
    ),
    (re.compile(r"\bBearer\s+[A-Za-z0-9._~+/=-]+", re.I), "Bearer ***"),
    (re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b"), "***"),
    # JWT-looking tokens
    (re.compile(r"\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"), "***"),
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def sanitize(message: str, limit: int = MAX_ERROR_CHARS) -> str:
    """An error message safe to store and show: credentials, tokens and keys masked,
    control characters and runs of whitespace collapsed, at most ``limit`` chars."""
    text = message
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    text = " ".join(_CONTROL.sub(" ", text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
