"""Value rules shared by the adapters: text, prices, currencies, GTINs, vocabularies,
classes. A value that breaks a rule raises ``ItemProblem``, which the adapter turns
into a ``RejectedItem`` for that one product."""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from typing import Any

from producers.capture.exceptions import InvalidField, InvalidGtin, MalformedCapture, MissingField

UNCLASSIFIED = "unclassified"
MAX_DEPTH = 64  # nesting a reader follows before calling the capture malformed


_AMOUNT_DIGITS = 18  # an amount's magnitude stays within 10**-18 … 10**18


def text(value: Any, name: str) -> str | None:
    """A scalar as trimmed text; None when absent or blank. Objects and lists are not
    text (one-element lists are unwrapped: JSON-LD writes single values both ways)."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        result = " ".join(str(value).split())
        return result or None
    raise InvalidField(f"{name} must be text or a number, not {type(value).__name__}")


def required_text(value: Any, name: str) -> str:
    result = text(value, name)
    if result is None:
        raise MissingField(f"{name} is required")
    return result


def price(value: Any, name: str) -> str | None:
    """A non-negative decimal, written without exponent or trailing zeros."""
    raw = text(value, name)
    if raw is None:
        return None
    try:
        amount = Decimal(raw)
    except InvalidOperation:
        raise InvalidField(f"{name} {raw!r} is not a decimal amount") from None
    if not amount.is_finite() or amount < 0:
        raise InvalidField(f"{name} {raw!r} is not a non-negative amount")
    if amount.is_zero():
        return "0"
    if not -_AMOUNT_DIGITS <= amount.adjusted() <= _AMOUNT_DIGITS:
        # Written out in full, 1E+999999 would be a million digits.
        raise InvalidField(f"{name} {raw!r} is out of range")
    return format(amount.normalize(), "f")


def currency(value: Any, name: str) -> str | None:
    raw = text(value, name)
    if raw is None:
        return None
    code = raw.upper()
    if not re.fullmatch(r"[A-Z]{3}", code):
        raise InvalidField(f"{name} {raw!r} is not an ISO 4217 currency code")
    return code


def gtin(value: Any, name: str) -> str | None:
    """A GTIN-8/12/13/14 with a valid check digit, written as GTIN-14 (zero-padded)
    so the same trade item matches whichever length a source wrote."""
    raw = text(value, name)
    if raw is None:
        return None
    digits = raw.replace(" ", "").replace("-", "")
    if not digits.isascii() or not digits.isdigit() or len(digits) not in (8, 12, 13, 14):
        raise InvalidGtin(f"{name} {raw!r} is not 8, 12, 13 or 14 digits")
    body, check = digits[:-1], int(digits[-1])
    weighted = sum(int(d) * (3 if i % 2 == 0 else 1) for i, d in enumerate(reversed(body)))
    if (10 - weighted % 10) % 10 != check:
        raise InvalidGtin(f"{name} {raw!r} fails its check digit")
    return digits.zfill(14)


_VOCABULARY_PREFIXES = ("https://schema.org/", "http://schema.org/", "schema:")


def vocabulary(value: Any, name: str, suffix: str = "") -> str | None:
    """A term of a closed vocabulary as snake_case: ``https://schema.org/InStock`` and
    ``in_stock`` both read ``in_stock``; ``suffix`` (e.g. "Condition") is dropped."""
    raw = text(value, name)
    if raw is None:
        return None
    for prefix in _VOCABULARY_PREFIXES:
        if raw.startswith(prefix):
            raw = raw[len(prefix) :]
            break
    if suffix and raw.endswith(suffix) and raw != suffix:
        raw = raw[: -len(suffix)]
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", raw).lower()
    snake = re.sub(r"[^a-z0-9]+", "_", snake).strip("_")
    if not snake:
        raise InvalidField(f"{name} {value!r} is not a vocabulary term")
    return snake


def class_of(category: str | None) -> str:
    """A class id from a category path: ``Shoes > Running Shoes`` → ``shoes/running-shoes``."""
    if category is None:
        return UNCLASSIFIED
    segments = []
    for segment in re.split(r"\s*(?:>|\u203a|\u00bb|/|\|)\s*", category):
        slug = re.sub(r"[^0-9a-z]+", "-", segment.lower()).strip("-")
        if slug:
            segments.append(slug)
    return "/".join(segments) or UNCLASSIFIED


def pointer(*tokens: str | int) -> str:
    """A JSON pointer (RFC 6901) of ``tokens``."""
    return "".join("/" + str(t).replace("~", "~0").replace("/", "~1") for t in tokens)


def leaf_paths(
    value: Any, prefix: str = "", skip: frozenset[str] = frozenset(), depth: int = 0
) -> Iterator[str]:
    """Dotted paths of every stated leaf under ``value``: list positions are not part of
    a path, nulls and blank strings state nothing, keys in ``skip`` are syntax."""
    if depth > MAX_DEPTH:
        raise MalformedCapture(f"values nest deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        for key, item in value.items():
            if key not in skip:
                yield from leaf_paths(item, f"{prefix}.{key}" if prefix else key, skip, depth + 1)
    elif isinstance(value, list):
        for item in value:
            yield from leaf_paths(item, prefix, skip, depth + 1)
    elif value is None or (isinstance(value, str) and not value.strip()):
        return
    elif prefix:
        yield prefix
