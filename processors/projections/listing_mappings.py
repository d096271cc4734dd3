"""The listing-mapping projection: which item each listing maps to.

A ``listing_mapping.mapped`` event depends on the item revision it maps to, so the
planner parks it until that item revision is applied; by the time ``fold`` sees it,
the item row is there.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import psycopg

from processors.projections.latest import latest_of
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


def load_revisions(
    conn: psycopg.Connection, generation: int, keys: Iterable[AggregateKey]
) -> dict[AggregateKey, int]:
    """The applied revision of each mapping among ``keys`` that the projection has.

    One index probe per key, as ``catalog_items.load_revisions`` does and for the
    same reason.
    """
    wanted = sorted({k for k in keys if k[2] == AGGREGATE})
    if not wanted:
        return {}
    rows = conn.execute(
        "SELECT k.t, k.c, k.l, p.revision"
        " FROM unnest(%b::text[], %b::text[], %b::text[]) AS k(t, c, l)"
        " CROSS JOIN LATERAL (SELECT revision FROM product_listing_mapping"
        "  WHERE generation = %b AND tenant_id = k.t AND catalog_id = k.c"
        "  AND listing_id = k.l LIMIT 1) p",
        ([k[0] for k in wanted], [k[1] for k in wanted], [k[3] for k in wanted], generation),
    ).fetchall()
    return {(t, c, AGGREGATE, listing): int(r) for t, c, listing, r in rows}


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


def write(conn: psycopg.Connection, generation: int, changes: Iterable[MappingState]) -> None:
    """Upsert the rows in one statement, as binary arrays; a row never moves to a lower
    revision. ``fold`` gives each listing one row, so no row is touched twice."""
    rows = list(changes)
    if not rows:
        return
    conn.execute(
        "INSERT INTO product_listing_mapping (generation, tenant_id, catalog_id, listing_id,"
        " item_id, item_revision, decision_id, revision, position)"
        " SELECT %b, * FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[],"
        " %b::int8[], %b::uuid[], %b::int8[], %b::int8[])"
        " ON CONFLICT (generation, tenant_id, catalog_id, listing_id) DO UPDATE SET"
        " item_id = excluded.item_id, item_revision = excluded.item_revision,"
        " decision_id = excluded.decision_id, revision = excluded.revision,"
        " position = excluded.position, updated_at = now()"
        " WHERE product_listing_mapping.revision < excluded.revision",
        (
            generation,
            [r.tenant_id for r in rows],
            [r.catalog_id for r in rows],
            [r.listing_id for r in rows],
            [r.item_id for r in rows],
            [r.item_revision for r in rows],
            [r.decision_id for r in rows],
            [r.revision for r in rows],
            [r.position for r in rows],
        ),
    )


def apply(conn: psycopg.Connection, generation: int, events: Iterable[Envelope]) -> None:
    """Fold the applied events of a batch and write them: what the applier calls."""
    write(conn, generation, fold(events).values())
