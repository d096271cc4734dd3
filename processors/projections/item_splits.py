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

import psycopg
from psycopg.types.json import Jsonb

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


def load_revisions(
    conn: psycopg.Connection, generation: int, keys: Iterable[AggregateKey]
) -> dict[AggregateKey, int]:
    """The applied revision of each split among ``keys`` (one index probe per key)."""
    wanted = sorted({k for k in keys if k[2] == AGGREGATE})
    if not wanted:
        return {}
    rows = conn.execute(
        "SELECT k.t, k.c, k.s, p.revision"
        " FROM unnest(%b::text[], %b::text[], %b::text[]) AS k(t, c, s)"
        " CROSS JOIN LATERAL (SELECT revision FROM product_item_split"
        "  WHERE generation = %b AND tenant_id = k.t AND catalog_id = k.c"
        "  AND split_id = k.s::uuid LIMIT 1) p",
        ([k[0] for k in wanted], [k[1] for k in wanted], [k[3] for k in wanted], generation),
    ).fetchall()
    return {(t, c, AGGREGATE, s): int(r) for t, c, s, r in rows}


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
            tuple(payload.successor_item_ids),
            dict(payload.remaps),
            payload.decision_id,
            event.aggregate.revision,
            event.position,
        )
    return changes


def write(conn: psycopg.Connection, generation: int, changes: Iterable[SplitState]) -> None:
    """Insert the rows one statement per batch; a row never moves to a lower revision.

    The successor lists go as one JSON array per row (PostgreSQL arrays of arrays must
    be rectangular, and splits have different numbers of successors).
    """
    rows = list(changes)
    if not rows:
        return
    conn.execute(
        "INSERT INTO product_item_split (generation, tenant_id, catalog_id, split_id,"
        " source_item_id, source_revision, successor_item_ids, remaps, decision_id,"
        " revision, position)"
        " SELECT %b, r.t, r.c, r.s, r.src, r.src_rev,"
        " ARRAY(SELECT jsonb_array_elements_text(r.successors)), r.remaps, r.d, r.rev, r.pos"
        " FROM unnest(%b::text[], %b::text[], %b::uuid[], %b::text[], %b::int8[],"
        " %b::jsonb[], %b::jsonb[], %b::uuid[], %b::int8[], %b::int8[])"
        " AS r(t, c, s, src, src_rev, successors, remaps, d, rev, pos)"
        " ON CONFLICT (generation, tenant_id, catalog_id, split_id) DO UPDATE SET"
        " source_item_id = excluded.source_item_id,"
        " source_revision = excluded.source_revision,"
        " successor_item_ids = excluded.successor_item_ids, remaps = excluded.remaps,"
        " decision_id = excluded.decision_id, revision = excluded.revision,"
        " position = excluded.position, updated_at = now()"
        " WHERE product_item_split.revision < excluded.revision",
        (
            generation,
            [r.tenant_id for r in rows],
            [r.catalog_id for r in rows],
            [r.split_id for r in rows],
            [r.source_item_id for r in rows],
            [r.source_revision for r in rows],
            [Jsonb(list(r.successor_item_ids)) for r in rows],
            [Jsonb(r.remaps) for r in rows],
            [r.decision_id for r in rows],
            [r.revision for r in rows],
            [r.position for r in rows],
        ),
    )


def apply(conn: psycopg.Connection, generation: int, events: Iterable[Envelope]) -> None:
    """Fold the applied events of a batch and write them: what the applier calls."""
    write(conn, generation, fold(events).values())
