"""The split projection: which successors replaced a split item (INV-08).

An ``item_split.recorded`` event depends on the source item's 'split' revision and on
every successor's first revision, so the planner parks it until those item rows are
applied: a split row never names an item the projection does not have yet. The
listings the split moved arrive as their own mapping events.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from psycopg.types.json import Jsonb

from processors.projections.table import Column, TableProjection, jsonb_list, uuid_id
from schemas.events import CatalogItemSplit, Envelope, aggregate_key
from schemas.ids import AggregateKey

AGGREGATE = "item_split"


@dataclass(frozen=True, slots=True)
class SplitState:
    """A whole projection row."""

    tenant_id: str
    catalog_id: str
    split_id: uuid.UUID
    source_item_id: str
    source_revision: int
    successor_item_ids: tuple[str, ...]
    remaps: dict[str, str]
    decision_id: uuid.UUID
    revision: int
    position: int


def fold(events: Iterable[Envelope]) -> dict[AggregateKey, SplitState]:
    """One row per split (a split has one revision; a redelivery repeats it)."""
    changes: dict[AggregateKey, SplitState] = {}
    for event in events:
        payload = event.payload
        if not isinstance(payload, CatalogItemSplit):
            continue
        changes[aggregate_key(event)] = SplitState(
            event.tenant_id,
            event.catalog_id,
            uuid.UUID(event.aggregate.id),
            payload.source_item_id,
            payload.source_revision,
            # A split's successors are a set (the resolver keeps no order); stored in
            # code-point order, the order an export lists them in, so the live path
            # and a rebuild's load write the same row.
            tuple(sorted(payload.successor_item_ids)),
            dict(payload.remaps),
            payload.decision_id,
            event.aggregate.revision,
            event.position,
        )
    return changes


PROJECTION = TableProjection(
    aggregate=AGGREGATE,
    table="product_item_split",
    id=uuid_id("split_id"),
    columns=(
        Column("source_item_id"),
        Column("source_revision"),
        # One JSON array per row, stored as text[]: PostgreSQL arrays of arrays must be
        # rectangular, and splits have different numbers of successors.
        Column(
            "successor_item_ids",
            "jsonb",
            encode=jsonb_list,
            select="ARRAY(SELECT jsonb_array_elements_text({}))",
        ),
        Column("remaps", encode=Jsonb),
        Column("decision_id"),
    ),
    row=SplitState,
    fold=fold,
)
