"""Opaque page cursors: where the next page starts, bound to what was asked.

A cursor is the URL-safe base64 (unpadded) of a JSON array
``[1, binding, after, generation]``: the format version, a digest of the listing
and its filters (``binding``: a cursor is refused for another listing or other
filters), the sort key of the page's last row (``after``), and the generation the
page was read from. Nothing in it is secret or trusted: a client that forges one
can only choose where its own page starts, inside the tenant its token may read.

The generation is informative. A page is always read from the generation serving
when it is read; a walk that spans a cutover goes on by key in the new generation
(each page says which generation it came from).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from processors.serving.exceptions import CursorInvalid

VERSION = 1
Key = tuple[str | int | float, ...]


def binding(listing: str, filters: Sequence[str | int | float | None]) -> str:
    """The digest a cursor carries of the listing and its filters."""
    canonical = json.dumps([listing, list(filters)], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Cursor:
    binding: str
    after: Key
    generation: int


def encode(cursor: Cursor) -> str:
    raw = json.dumps(
        [VERSION, cursor.binding, list(cursor.after), cursor.generation],
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode(text: str, expected_binding: str, shape: tuple[type, ...]) -> Cursor:
    """The cursor in ``text``, whose key has one value of each type in ``shape``; or
    ``CursorInvalid`` (a 400) for anything else, also a cursor of another listing or
    other filters."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        value = json.loads(raw.decode(), parse_constant=_refuse)
    except (binascii.Error, ValueError) as exc:
        raise CursorInvalid("the cursor is not one this API issued") from exc
    if not (
        isinstance(value, list)
        and len(value) == 4
        and value[0] == VERSION
        and isinstance(value[1], str)
        and isinstance(value[2], list)
        and _is_int(value[3])
    ):
        raise CursorInvalid("the cursor is not one this API issued")
    if value[1] != expected_binding:
        raise CursorInvalid("the cursor belongs to another listing or other filters")
    after = value[2]
    if len(after) != len(shape) or not all(_fits(v, t) for v, t in zip(after, shape, strict=True)):
        raise CursorInvalid("the cursor is not one this API issued")
    key = tuple(float(v) if t is float else v for v, t in zip(after, shape, strict=True))
    return Cursor(value[1], key, value[3])


def _refuse(constant: str) -> object:
    raise ValueError(f"{constant} is not JSON")


_INT8 = 2**63


def _is_int(value: object) -> bool:
    """An integer a PostgreSQL ``bigint`` holds (positions, versions, generations)."""
    return isinstance(value, int) and not isinstance(value, bool) and -_INT8 <= value < _INT8


def _fits(value: object, kind: type) -> bool:
    if kind is float:
        return _is_int(value) or isinstance(value, float)
    if kind is int:
        return _is_int(value)
    return isinstance(value, kind)
