"""The catalog-item projection: how events change an item's row (``product_item``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace

from psycopg.types.json import Jsonb

from processors.projections.table import Column, PartialUpdate, TableProjection, plain_id
from schemas.events import CatalogItemRetired, CatalogItemUpserted, Envelope, aggregate_key
from schemas.ids import AggregateKey

AGGREGATE = "catalog_item"


@dataclass(frozen=True, slots=True)
class ItemState:
    """A whole projection row."""

    tenant_id: str
    catalog_id: str
    item_id: str
    class_id: str
    status: str
    title: str
    parent_item_id: str | None
    attributes: dict[str, str]
    decision_id: uuid.UUID | None
    revision: int
    position: int


@dataclass(frozen=True, slots=True)
class StatusChange:
    """A change to a row this batch has not seen whole (its earlier revision is stored)."""

    tenant_id: str
    catalog_id: str
    item_id: str
    status: str
    decision_id: uuid.UUID | None
    revision: int
    position: int


Change = ItemState | StatusChange


def fold(events: Iterable[Envelope]) -> dict[AggregateKey, Change]:
    """Collapse the applied events of a batch into one change per item."""
    changes: dict[AggregateKey, Change] = {}
    for event in events:
        key = aggregate_key(event)
        payload = event.payload
        rev, pos = event.aggregate.revision, event.position
        if isinstance(payload, CatalogItemUpserted):
            changes[key] = ItemState(
                event.tenant_id,
                event.catalog_id,
                event.aggregate.id,
                payload.class_id,
                payload.status,
                payload.title,
                payload.parent_item_id,
                dict(payload.attributes),
                payload.decision_id,
                rev,
                pos,
            )
        elif isinstance(payload, CatalogItemRetired):
            previous = changes.get(key)
            decided = payload.decision_id
            if isinstance(previous, ItemState):
                changes[key] = replace(
                    previous, status="retired", decision_id=decided, revision=rev, position=pos
                )
            else:
                changes[key] = StatusChange(
                    event.tenant_id,
                    event.catalog_id,
                    event.aggregate.id,
                    "retired",
                    decided,
                    rev,
                    pos,
                )
    return changes


PROJECTION = TableProjection(
    aggregate=AGGREGATE,
    table="product_item",
    id=plain_id("item_id"),
    columns=(
        Column("class_id"),
        Column("status"),
        Column("title"),
        Column("parent_item_id"),
        Column("attributes", encode=Jsonb),
        Column("decision_id"),
    ),
    row=ItemState,
    fold=fold,
    # A retirement the batch has no whole row for changes the stored row's status (and
    # the decision that made it).
    partial=PartialUpdate(StatusChange, ("status", "decision_id")),
)
