"""Event dataclasses as Avro records and back, derived from the dataclasses themselves.

Each payload type is written as the record named ``gapless.catalog.<ClassName>``
(the union branch of the envelope's ``payload``), with one field per dataclass field
of the same name. How a field's value crosses is read once, at import, from its
type annotation:

* ``tuple[X, ...]`` is an Avro array: a list going out, a tuple coming back, each
  element crossing as an ``X`` does;
* ``Mapping[str, str]`` is an Avro map: a plain ``dict`` going out (fastavro writes
  one about 1.5 us faster than a read-only view of it, more than the copy costs);
* a nested event dataclass (``EvidenceRef``, ``AggregateRef``) is a record;
* a ``uuid.UUID`` inside an array is a string (a bare one is the ``uuid`` logical
  type, which fastavro takes and gives as a ``UUID``);
* anything else (text, numbers, timestamps, optional values) crosses as it is.

A field the record does not have takes the dataclass's default: a reader of an
earlier release's schemas (an agent not yet upgraded, as the rolling-upgrade test
plays one) reads an optional field added since as absent, the value old events
carry. A new payload type therefore needs its dataclass in ``schemas.events``'
``Payload`` union and its ``.avsc`` file, and nothing here.
"""

from __future__ import annotations

import dataclasses
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from schemas.events import AggregateRef, Payload

NAMESPACE = "gapless.catalog"

Convert = Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


def _as_uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(value)


@dataclasses.dataclass(frozen=True, slots=True)
class RecordType:
    """How one event dataclass crosses: the fields whose values cross as they are (the
    common case, kept apart so they cost no call), and the others with their two
    conversions."""

    cls: type[Any]
    fullname: str
    plain: tuple[str, ...]
    converted: tuple[tuple[str, Convert, Convert], ...]

    def to_record(self, value: Any) -> dict[str, Any]:
        record = {name: getattr(value, name) for name in self.plain}
        for name, out, _ in self.converted:
            record[name] = out(getattr(value, name))
        return record

    def from_record(self, record: Mapping[str, Any]) -> Any:
        fields = {name: record[name] for name in self.plain if name in record}
        for name, _, back in self.converted:
            if name in record:
                fields[name] = back(record[name])
        return self.cls(**fields)


def _conversions(hint: Any, in_array: bool = False) -> tuple[Convert, Convert] | None:
    """(going out, coming back) for a value annotated ``hint``; ``None`` where it
    crosses as it is."""
    origin = typing.get_origin(hint)
    if origin is tuple:
        out_item, back_item = _conversions(typing.get_args(hint)[0], True) or (_identity, _identity)
        return (
            lambda values: [out_item(v) for v in values],
            lambda values: tuple(back_item(v) for v in values),
        )
    if origin is Mapping or origin is dict:
        return dict, _identity
    if origin in (typing.Union, types.UnionType):
        return None  # an optional scalar: crosses as it is
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        nested = record_type(hint)
        return nested.to_record, nested.from_record
    if hint is uuid.UUID and in_array:
        return str, _as_uuid
    return None


def record_type(cls: type[Any]) -> RecordType:
    """The crossing of ``cls``, from its fields' annotations."""
    hints = typing.get_type_hints(cls)
    crossing = {f.name: _conversions(hints[f.name]) for f in dataclasses.fields(cls)}
    return RecordType(
        cls=cls,
        fullname=f"{NAMESPACE}.{cls.__name__}",
        plain=tuple(name for name, c in crossing.items() if c is None),
        converted=tuple((name, *c) for name, c in crossing.items() if c is not None),
    )


PAYLOADS: tuple[RecordType, ...] = tuple(record_type(cls) for cls in typing.get_args(Payload))
"""Every payload type of the envelope's union, in the union's order."""
BY_TYPE: dict[type[Any], RecordType] = {p.cls: p for p in PAYLOADS}
BY_NAME: dict[str, RecordType] = {p.fullname: p for p in PAYLOADS}
AGGREGATE = record_type(AggregateRef)
