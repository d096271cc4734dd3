"""Attribute rules (INV-07): applicability through a class lineage, canonical value
text, and the limits on ids, labels, values and versions. Pure functions, no I/O."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from decimal import Decimal, InvalidOperation

from db.tables.attributes import KEY_PATTERN
from producers.resolver.exceptions import AttributeNotFound, AttributeValueInvalid, DomainError

MAX_ID = 200
MAX_LABEL = 1_000
MAX_VALUE = 10_000
MAX_VERSION = 2**31 - 1
MAX_NUMBER_DIGITS = 60
"""A number keeps at most this many significant digits and this magnitude (10^±60),
so its canonical text stays short."""

KEY = re.compile(KEY_PATTERN)
"""An attribute key: what ``attribute_definition``'s CHECK accepts."""

RawValue = str | bool | int | float | Decimal
"""A value as a caller gives it; ``canonical_value`` turns it into stored text."""


def applies(lineage: Sequence[str], applies_to: Iterable[str]) -> bool:
    """Whether a definition applying to ``applies_to`` reaches a class whose lineage
    (the class, then its ancestors) is ``lineage``."""
    return not set(lineage).isdisjoint(applies_to)


def canonical_value(value_type: str, allowed_values: Sequence[str], raw: RawValue) -> str:
    """The stored text of ``raw`` as a value of the type, or ``AttributeValueInvalid``.

    text: any non-empty string; number: a finite decimal (int, float, Decimal or its
    string), kept without exponent, trailing zeros or a negative zero (``"1.5"``,
    ``"-0.25"``, ``"100"``); boolean: ``true``/``false`` (a bool or that text); enum:
    one of ``allowed_values``, exactly. PostgreSQL's ``attribute_value_fits`` accepts
    exactly these forms.
    """
    if value_type == "number":
        return _canonical_number(raw)
    if value_type == "boolean":
        if isinstance(raw, bool):
            return "true" if raw else "false"
        if raw in ("true", "false"):
            return str(raw)
        raise AttributeValueInvalid(f"{raw!r} is not a boolean (true or false)")
    if not isinstance(raw, str):
        raise AttributeValueInvalid(f"a {value_type} value is a string, not {raw!r}")
    if value_type == "enum":
        if raw not in allowed_values:
            raise AttributeValueInvalid(f"{raw!r} is not one of {list(allowed_values)}")
        return raw
    if value_type == "text":
        check_text(raw, "a text value", MAX_VALUE, AttributeValueInvalid)
        return raw
    raise AttributeValueInvalid(f"unknown value type {value_type!r}")


def _canonical_number(raw: RawValue) -> str:
    if isinstance(raw, bool):
        raise AttributeValueInvalid(f"{raw!r} is a boolean, not a number")
    try:
        if isinstance(raw, float):
            if not math.isfinite(raw):
                raise AttributeValueInvalid(f"{raw!r} is not a finite number")
            number = Decimal(repr(raw))  # the shortest text that reads back as the float
        elif isinstance(raw, str):
            if len(raw) > MAX_VALUE:
                raise AttributeValueInvalid("the number is too long")
            number = Decimal(raw)
        else:
            number = Decimal(raw)
    except InvalidOperation as exc:
        raise AttributeValueInvalid(f"{raw!r} is not a number") from exc
    if not number.is_finite():
        raise AttributeValueInvalid(f"{raw!r} is not a finite number")
    if number.is_zero():
        return "0"
    # Drop trailing zeros by hand: Decimal.normalize() would also round to the
    # context's 28 digits, silently changing a longer number.
    sign, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)  # finite
    kept = list(digits)
    while kept[-1] == 0:
        kept.pop()
        exponent += 1
    magnitude = len(kept) + exponent - 1
    if len(kept) > MAX_NUMBER_DIGITS or abs(magnitude) > MAX_NUMBER_DIGITS:
        raise AttributeValueInvalid(
            f"{raw!r} has more than {MAX_NUMBER_DIGITS} significant digits or a magnitude"
            f" beyond 10^±{MAX_NUMBER_DIGITS}"
        )
    return format(Decimal((sign, tuple(kept), exponent)), "f")


def check_text(value: str, what: str, limit: int, error: type[DomainError]) -> None:
    if not value:
        raise error(f"{what} cannot be empty")
    if len(value) > limit:
        raise error(f"{what} is longer than {limit} characters")
    if "\x00" in value:
        raise error(f"{what} contains a NUL character")


def check_reference(attribute_key: str, version: int) -> None:
    """A key or version no definition can have is simply not found."""
    if not KEY.fullmatch(attribute_key) or not 1 <= version <= MAX_VERSION:
        raise AttributeNotFound(f"no attribute {attribute_key!r} version {version} can exist")
