"""The listing-mapping projection: which item each listing maps to.

A ``listing_mapping.mapped`` event depends on the item revision it maps to, so the
planner parks it until that item revision is applied; by the time ``fold`` sees it,
the item row is there.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from processors.projections.latest import latest_of
from processors.projections.table import Column, TableProjection, plain_id
from schemas.events import Envelope, ListingMapped
from schemas.ids import AggregateKey

AGGREGATE = "listing_mapping"


@dataclass(frozen=True, slots=True)
class MappingState:
    """A whole projection row."""

    tenant_id: str
    catalog_id: str
    listing_id: str
    item_id: str
    item_revision: int
    decision_id: uuid.UUID
    revision: int
    position: int


def fold(events: Iterable[Envelope]) -> dict[AggregateKey, MappingState]:
    """One row per listing: the batch's last revision of it."""
    return {
        key: MappingState(
            event.tenant_id,
            event.catalog_id,
            event.aggregate.id,
            payload.item_id,
            payload.item_revision,
            payload.decision_id,
            event.aggregate.revision,
            event.position,
        )
        for key, (event, payload) in latest_of(events, ListingMapped).items()
    }


PROJECTION = TableProjection(
    aggregate=AGGREGATE,
    table="product_listing_mapping",
    id=plain_id("listing_id"),
    columns=(
        Column("item_id"),
        Column("item_revision"),
        Column("decision_id"),
    ),
    row=MappingState,
    fold=fold,
)
