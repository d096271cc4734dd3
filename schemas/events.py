"""Typed catalog events: the Python side of the Avro contract in ``schemas/avro``.

Plain frozen dataclasses with no Avro in them; ``schemas.codec`` maps them to and
from the wire. Each payload class names its own ``event_type``, so an envelope's
type can never disagree with its payload.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import ClassVar


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamKey:
    """The stream family; the Kafka key, so one stream stays in one partition."""

    tenant_id: str
    catalog_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AggregateRef:
    """One revision of one aggregate."""

    type: str
    id: str
    revision: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogItemUpserted:
    """A catalog item's full current state.

    ``attributes`` is stored as a read-only view of a private copy, so an event
    cannot change after it was encoded. (It also makes the event unhashable.)
    """

    EVENT_TYPE: ClassVar[str] = "catalog_item.upserted"

    class_id: str
    status: str
    title: str
    parent_item_id: str | None = None
    attributes: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", MappingProxyType(dict(self.attributes)))


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogItemRetired:
    """A catalog item taken out of the catalog."""

    EVENT_TYPE: ClassVar[str] = "catalog_item.retired"

    reason: str


Payload = CatalogItemUpserted | CatalogItemRetired

PAYLOAD_TYPES: Mapping[str, type[Payload]] = MappingProxyType(
    {cls.EVENT_TYPE: cls for cls in (CatalogItemUpserted, CatalogItemRetired)}
)
"""Payload class by ``event_type``, for consumers that dispatch on the type name."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope:
    """One event at one position of the stream ``(tenant_id, catalog_id, history_epoch)``.

    ``occurred_at`` must be timezone-aware; it is kept in UTC, the zone the wire
    format decodes to. ``dependencies`` are aggregate revisions that must already
    be applied before this event is.
    """

    tenant_id: str
    catalog_id: str
    history_epoch: int
    position: int
    event_id: uuid.UUID
    aggregate: AggregateRef
    dependencies: tuple[AggregateRef, ...] = ()
    occurred_at: datetime
    payload: Payload

    def __post_init__(self) -> None:
        occurred_at = self.occurred_at
        if occurred_at.tzinfo is not UTC:
            if occurred_at.utcoffset() is None:
                raise ValueError(f"occurred_at must be timezone-aware, got {occurred_at!r}")
            object.__setattr__(self, "occurred_at", occurred_at.astimezone(UTC))
        if type(self.dependencies) is not tuple:
            object.__setattr__(self, "dependencies", tuple(self.dependencies))

    @property
    def event_type(self) -> str:
        """The payload's event type, e.g. ``"catalog_item.upserted"``."""
        return self.payload.EVENT_TYPE

    @property
    def stream(self) -> tuple[str, str, int]:
        """The stream this event belongs to: ``(tenant_id, catalog_id, history_epoch)``."""
        return (self.tenant_id, self.catalog_id, self.history_epoch)

    @property
    def key(self) -> StreamKey:
        """The Kafka key: the stream family, without the epoch."""
        return StreamKey(tenant_id=self.tenant_id, catalog_id=self.catalog_id)
