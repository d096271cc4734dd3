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

from schemas.ids import AggregateKey, StreamId


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
    decision_id: uuid.UUID | None = None
    """The decision that made this state; absent from events of schema release v2 and
    before."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", MappingProxyType(dict(self.attributes)))


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogItemRetired:
    """A catalog item taken out of the catalog."""

    EVENT_TYPE: ClassVar[str] = "catalog_item.retired"

    reason: str
    decision_id: uuid.UUID | None = None
    """The decision that retired the item; absent from events of schema release v2 and
    before."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EvidenceRef:
    """Where evidence for a decision is: a capture and a locator inside it."""

    capture_id: str
    locator: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionRecorded:
    """An immutable decision, by a reviewer (``actor_kind`` "human") or a rule.

    ``case_id``/``case_revision`` name the review-case revision it was made against,
    if it was made on a case.
    """

    EVENT_TYPE: ClassVar[str] = "decision.recorded"

    action: str
    actor: str
    actor_kind: str
    rationale: str
    evidence: tuple[EvidenceRef, ...]
    prior_decision_ids: tuple[uuid.UUID, ...] = ()
    case_id: str | None = None
    case_revision: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "evidence", tuple(self.evidence))
        object.__setattr__(self, "prior_decision_ids", tuple(self.prior_decision_ids))


@dataclass(frozen=True, slots=True, kw_only=True)
class ListingMapped:
    """A listing mapped onto an item, at the item revision that was active then."""

    EVENT_TYPE: ClassVar[str] = "listing_mapping.mapped"

    item_id: str
    item_revision: int
    decision_id: uuid.UUID


@dataclass(frozen=True, slots=True, kw_only=True)
class ShippingPolicyVersioned:
    """One version of a shipping policy in one scope, valid over [from, to).

    The version is the aggregate revision; ``effective_to`` None is an open end.
    Times must be timezone-aware and are kept in UTC, like ``occurred_at``.
    """

    EVENT_TYPE: ClassVar[str] = "shipping_policy.versioned"

    scope: str
    effective_from: datetime
    effective_to: datetime | None = None
    terms: Mapping[str, str] = field(default_factory=dict)
    decision_id: uuid.UUID

    def __post_init__(self) -> None:
        object.__setattr__(self, "effective_from", _utc(self.effective_from, "effective_from"))
        if self.effective_to is not None:
            object.__setattr__(self, "effective_to", _utc(self.effective_to, "effective_to"))
        object.__setattr__(self, "terms", MappingProxyType(dict(self.terms)))


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogItemSplit:
    """An item split into successors; ``remaps`` maps listing id to successor item id.

    The source item itself stays, with status "split" at ``source_revision`` (its own
    ``catalog_item.upserted`` event says so).
    """

    EVENT_TYPE: ClassVar[str] = "item_split.recorded"

    source_item_id: str
    source_revision: int
    successor_item_ids: tuple[str, ...]
    remaps: Mapping[str, str] = field(default_factory=dict)
    decision_id: uuid.UUID

    def __post_init__(self) -> None:
        object.__setattr__(self, "successor_item_ids", tuple(self.successor_item_ids))
        object.__setattr__(self, "remaps", MappingProxyType(dict(self.remaps)))


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogClassDefined:
    """A class registered in a catalog; the class id is the aggregate id.

    Attribute definitions that apply to a class apply to its descendants too. A
    class never changes once defined (re-parenting could take values out of their
    definitions' reach), so its one event is revision 1.
    """

    EVENT_TYPE: ClassVar[str] = "catalog_class.defined"

    parent_class_id: str | None = None
    decision_id: uuid.UUID


@dataclass(frozen=True, slots=True, kw_only=True)
class AttributeDefined:
    """The whole current state of one version of an attribute definition.

    The aggregate id is ``"<attribute_key>/<version>"``. A version is defined as a
    draft or published; a draft is published by a later revision. A published version
    never changes, so values may rely on its type, allowed values and applicability.
    """

    EVENT_TYPE: ClassVar[str] = "attribute_definition.defined"

    attribute_key: str
    version: int
    label: str
    value_type: str
    allowed_values: tuple[str, ...] = ()
    applies_to: tuple[str, ...] = ()
    status: str
    decision_id: uuid.UUID

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed_values", tuple(self.allowed_values))
        object.__setattr__(self, "applies_to", tuple(self.applies_to))


@dataclass(frozen=True, slots=True, kw_only=True)
class AttributeValueSet:
    """An item's current value of one attribute; the aggregate id is
    ``"<item_id>/<attribute_key>"``.

    ``value`` is canonical text for ``value_type`` (a decimal number, ``true`` or
    ``false``, an enum symbol, or text) under the published ``definition_version``;
    ``item_revision`` is the item's active revision the value was accepted against.
    """

    EVENT_TYPE: ClassVar[str] = "attribute_value.set"

    item_id: str
    item_revision: int
    attribute_key: str
    definition_version: int
    value_type: str
    value: str
    decision_id: uuid.UUID


def _utc(value: datetime, name: str) -> datetime:
    if value.tzinfo is UTC:
        return value
    if value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got {value!r}")
    return value.astimezone(UTC)


Payload = (
    CatalogItemUpserted
    | CatalogItemRetired
    | DecisionRecorded
    | ListingMapped
    | ShippingPolicyVersioned
    | CatalogItemSplit
    | CatalogClassDefined
    | AttributeDefined
    | AttributeValueSet
)

PAYLOAD_TYPES: Mapping[str, type[Payload]] = MappingProxyType(
    {
        cls.EVENT_TYPE: cls
        for cls in (
            CatalogItemUpserted,
            CatalogItemRetired,
            DecisionRecorded,
            ListingMapped,
            ShippingPolicyVersioned,
            CatalogItemSplit,
            CatalogClassDefined,
            AttributeDefined,
            AttributeValueSet,
        )
    }
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
        object.__setattr__(self, "occurred_at", _utc(self.occurred_at, "occurred_at"))
        if type(self.dependencies) is not tuple:
            object.__setattr__(self, "dependencies", tuple(self.dependencies))

    @property
    def event_type(self) -> str:
        """The payload's event type, e.g. ``"catalog_item.upserted"``."""
        return self.payload.EVENT_TYPE

    @property
    def stream(self) -> StreamId:
        """The stream this event belongs to."""
        return StreamId(self.tenant_id, self.catalog_id, self.history_epoch)

    @property
    def key(self) -> StreamKey:
        """The Kafka key: the stream family, without the epoch."""
        return StreamKey(tenant_id=self.tenant_id, catalog_id=self.catalog_id)


def aggregate_key(event: Envelope, ref: AggregateRef | None = None) -> AggregateKey:
    """The key of the aggregate ``event`` changes, or of ``ref`` (one it depends on)."""
    ref = ref or event.aggregate
    return (event.tenant_id, event.catalog_id, ref.type, ref.id)
