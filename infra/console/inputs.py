"""What the console's forms and filters accept: each parser returns the value or
raises ``FormInvalid`` (or one of its kinds) naming the field, so bad input changes
nothing and the page says why with a stable code."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

from infra.console.exceptions import FormInvalid, ReasonEmpty, ReasonTooLong
from schemas.http.params import MAX_ID

MAX_REASON = 500
"""The longest reason an action is audited with (characters)."""

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def reason(text: str | None, *, required: bool = True) -> str:
    """The reason an action is audited with, trimmed: ``FORM_REASON_EMPTY`` when a
    required one is blank, ``FORM_REASON_TOO_LONG`` above ``MAX_REASON``."""
    given = (text or "").strip()
    if required and not given:
        raise ReasonEmpty("give a reason: it is audited with your name")
    if len(given) > MAX_REASON:
        raise ReasonTooLong(f"a reason has at most {MAX_REASON} characters (got {len(given)})")
    return given


def name(text: str | None, field: str) -> str:
    """A tenant, catalog or consumer name: 1 to ``MAX_ID`` characters, no slash."""
    given = (text or "").strip()
    if not given or len(given) > MAX_ID or "/" in given:
        raise FormInvalid(f"{field}: 1 to {MAX_ID} characters, without '/'")
    return given


def optional_name(text: str | None, field: str) -> str | None:
    return None if not (text or "").strip() else name(text, field)


def entry_id(text: str | int) -> int:
    """A quarantine entry's number."""
    if isinstance(text, int):
        return text
    if not text.strip().isdigit() or len(text.strip()) > 18:
        raise FormInvalid(f"{text[:40]!r} is not a quarantine entry number")
    return int(text)


def uuid_of(text: str, what: str) -> uuid.UUID:
    try:
        return uuid.UUID(text.strip())
    except ValueError:
        raise FormInvalid(f"{text[:40]!r} is not {what} (a UUID)") from None


def stream(text: str | None) -> tuple[str, str, int] | None:
    """``tenant/catalog/epoch`` (blank: no stream filter)."""
    given = (text or "").strip()
    if not given:
        return None
    parts = given.split("/")
    if len(parts) != 3 or not all(parts) or not parts[2].isdigit() or len(parts[2]) > 18:
        raise FormInvalid(f"stream: {given[:60]!r} is not tenant/catalog/epoch, e.g. t1/c1/1")
    return (name(parts[0], "tenant"), name(parts[1], "catalog"), int(parts[2]))


def duration(text: str | None) -> timedelta | None:
    """``90s``, ``10m``, ``2h``, ``1d`` or plain seconds (blank: none)."""
    given = (text or "").strip()
    if not given:
        return None
    match = _DURATION.match(given)
    if match is None:
        raise FormInvalid(f"age: {given[:40]!r} is not a duration such as 90s, 10m, 2h or 1d")
    return timedelta(seconds=float(match[1]) * _UNIT[match[2]])


def capture_target(text: str) -> int | uuid.UUID:
    """A failed product's number, or a failed job's id (as ``gapless captures retry``)."""
    given = text.strip()
    if given.isdigit() and len(given) <= 18:
        return int(given)
    try:
        return uuid.UUID(given)
    except ValueError:
        raise FormInvalid(
            f"{given[:40]!r} is neither a product number nor a job id (a UUID)"
        ) from None
