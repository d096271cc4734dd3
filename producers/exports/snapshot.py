"""Accepted state as events: one event per aggregate revision the snapshot holds.

Each event is what a replay of the stream through W would leave as that aggregate's
latest state, in the payload the live path already applies (an item's full state
as ``catalog_item.upserted``, whatever its status), so a rebuild loads a snapshot
through the projections' own fold. Exported events have no dependencies (the
snapshot is consistent as a whole), position W, an event id derived from the
export and the aggregate revision, and the time the row was last written.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from producers.resolver.attributes.facts import CLASS, DEFINITION, VALUE
from producers.resolver.listing_mappings import AGGREGATE as MAPPING
from producers.resolver.shipping_policies import AGGREGATE as POLICY
from producers.resolver.splits import AGGREGATE as SPLIT
from producers.resolver.splits import ITEM
from schemas.events import (
    AggregateRef,
    AttributeDefined,
    AttributeValueSet,
    CatalogClassDefined,
    CatalogItemSplit,
    CatalogItemUpserted,
    Envelope,
    ListingMapped,
    Payload,
    ShippingPolicyVersioned,
)
from schemas.ids import StreamId, definition_id, value_id

Built = tuple[AggregateRef, Payload, datetime]


def _uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _item(row: tuple[Any, ...]) -> Built:
    item_id, class_id, status, title, parent, attributes, revision, at = row
    payload = CatalogItemUpserted(
        class_id=class_id,
        status=status,
        title=title,
        parent_item_id=parent,
        attributes=dict(attributes or {}),
    )
    return AggregateRef(type=ITEM, id=item_id, revision=int(revision)), payload, at


def _class(row: tuple[Any, ...]) -> Built:
    class_id, parent, decision_id, at = row
    payload = CatalogClassDefined(parent_class_id=parent, decision_id=_uuid(decision_id))
    return AggregateRef(type=CLASS, id=class_id, revision=1), payload, at


def _definition(row: tuple[Any, ...]) -> Built:
    key, version, label, value_type, allowed, applies, status, revision, decision_id, at = row
    payload = AttributeDefined(
        attribute_key=key,
        version=int(version),
        label=label,
        value_type=value_type,
        allowed_values=tuple(allowed),
        applies_to=tuple(applies),
        status=status,
        decision_id=_uuid(decision_id),
    )
    ref = AggregateRef(type=DEFINITION, id=definition_id(key, int(version)), revision=int(revision))
    return ref, payload, at


def _value(row: tuple[Any, ...]) -> Built:
    item_id, key, version, value_type, value, item_revision, revision, decision_id, at = row
    payload = AttributeValueSet(
        item_id=item_id,
        item_revision=int(item_revision),
        attribute_key=key,
        definition_version=int(version),
        value_type=value_type,
        value=value,
        decision_id=_uuid(decision_id),
    )
    return AggregateRef(type=VALUE, id=value_id(item_id, key), revision=int(revision)), payload, at


def _mapping(row: tuple[Any, ...]) -> Built:
    listing_id, item_id, item_revision, decision_id, revision, at = row
    payload = ListingMapped(
        item_id=item_id, item_revision=int(item_revision), decision_id=_uuid(decision_id)
    )
    return AggregateRef(type=MAPPING, id=listing_id, revision=int(revision)), payload, at


def _policy(row: tuple[Any, ...]) -> Built:
    policy_id, version, scope, effective_from, effective_to, terms, decision_id, at = row
    payload = ShippingPolicyVersioned(
        scope=scope,
        effective_from=effective_from,
        effective_to=effective_to,
        terms=dict(terms or {}),
        decision_id=_uuid(decision_id),
    )
    return AggregateRef(type=POLICY, id=policy_id, revision=int(version)), payload, at


def _split(row: tuple[Any, ...]) -> Built:
    split_id, source, source_revision, decision_id, at, successors, remaps = row
    payload = CatalogItemSplit(
        source_item_id=source,
        source_revision=int(source_revision),
        successor_item_ids=tuple(successors),
        remaps=dict(remaps or {}),
        decision_id=_uuid(decision_id),
    )
    return AggregateRef(type=SPLIT, id=str(_uuid(split_id)), revision=1), payload, at


BUILDERS: dict[str, Callable[[tuple[Any, ...]], Built]] = {
    "items": _item,
    "classes": _class,
    "definitions": _definition,
    "values": _value,
    "mappings": _mapping,
    "policies": _policy,
    "splits": _split,
}


def snapshot_events(
    rows: Iterator[tuple[str, tuple[Any, ...]]],
    stream: StreamId,
    position: int,
    export_id: uuid.UUID,
) -> Iterator[Envelope]:
    """The events of one snapshot, from ``db.exports.state_rows``."""
    for kind, row in rows:
        ref, payload, at = BUILDERS[kind](row)
        yield Envelope(
            tenant_id=stream.tenant_id,
            catalog_id=stream.catalog_id,
            history_epoch=stream.history_epoch,
            position=position,
            event_id=uuid.uuid5(export_id, f"{ref.type}/{ref.id}/{ref.revision}"),
            aggregate=ref,
            occurred_at=at,
            payload=payload,
        )
