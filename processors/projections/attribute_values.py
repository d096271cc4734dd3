"""The attribute-value projection: each item's current value of each attribute.

An ``attribute_value.set`` event depends on the item revision it was accepted
against and on the published revision of its definition version, so the planner
parks it until both are applied; by the time ``fold`` sees it, the item row and the
definition row are there. Each event carries the whole value, so the newest revision
of an (item, key) replaces the row.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import psycopg

from processors.projections.latest import latest_of
from schemas.events import AttributeValueSet, Envelope
from schemas.ids import AggregateKey, parse_value_id

AGGREGATE = "attribute_value"


@dataclass(frozen=True, slots=True)
class ValueState:
    """A whole projection row."""

    tenant_id: str
    catalog_id: str
    item_id: str
    attribute_key: str
    definition_version: int
    value_type: str
    value: str
    item_revision: int
    decision_id: uuid.UUID
    revision: int
    position: int


def load_revisions(
    conn: psycopg.Connection, generation: int, keys: Iterable[AggregateKey]
) -> dict[AggregateKey, int]:
    """The applied revision of each value among ``keys`` that the projection has: one
    primary-key probe per key, as the other projections do."""
    wanted = []
    for key in sorted({k for k in keys if k[2] == AGGREGATE}):
        parts = parse_value_id(key[3])
        if parts is not None:
            wanted.append((key, *parts))
    if not wanted:
        return {}
    rows = conn.execute(
        "SELECT k.t, k.c, k.i, k.a, p.revision"
        " FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[]) AS k(t, c, i, a)"
        " CROSS JOIN LATERAL (SELECT revision FROM product_attribute_value"
        "  WHERE generation = %b AND tenant_id = k.t AND catalog_id = k.c"
        "  AND item_id = k.i AND attribute_key = k.a LIMIT 1) p",
        (
            [w[0][0] for w in wanted],
            [w[0][1] for w in wanted],
            [w[1] for w in wanted],
            [w[2] for w in wanted],
            generation,
        ),
    ).fetchall()
    return {(t, c, AGGREGATE, f"{i}/{a}"): int(r) for t, c, i, a, r in rows}


def fold(events: Iterable[Envelope]) -> dict[AggregateKey, ValueState]:
    """One row per (item, key): the batch's last revision of it."""
    return {
        key: ValueState(
            event.tenant_id,
            event.catalog_id,
            payload.item_id,
            payload.attribute_key,
            payload.definition_version,
            payload.value_type,
            payload.value,
            payload.item_revision,
            payload.decision_id,
            event.aggregate.revision,
            event.position,
        )
        for key, (event, payload) in latest_of(events, AttributeValueSet).items()
    }


def write(conn: psycopg.Connection, generation: int, changes: Iterable[ValueState]) -> None:
    """Upsert the rows in one statement, as binary arrays; a row never moves to a lower
    revision. ``fold`` gives each (item, key) one row, so no row is touched twice."""
    rows = list(changes)
    if not rows:
        return
    conn.execute(
        "INSERT INTO product_attribute_value (generation, tenant_id, catalog_id, item_id,"
        " attribute_key, definition_version, value_type, value, item_revision, decision_id,"
        " revision, position)"
        " SELECT %b, * FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[],"
        " %b::int8[], %b::text[], %b::text[], %b::int8[], %b::uuid[], %b::int8[], %b::int8[])"
        " ON CONFLICT (generation, tenant_id, catalog_id, item_id, attribute_key)"
        " DO UPDATE SET definition_version = excluded.definition_version,"
        " value_type = excluded.value_type, value = excluded.value,"
        " item_revision = excluded.item_revision, decision_id = excluded.decision_id,"
        " revision = excluded.revision, position = excluded.position, updated_at = now()"
        " WHERE product_attribute_value.revision < excluded.revision",
        (
            generation,
            [r.tenant_id for r in rows],
            [r.catalog_id for r in rows],
            [r.item_id for r in rows],
            [r.attribute_key for r in rows],
            [r.definition_version for r in rows],
            [r.value_type for r in rows],
            [r.value for r in rows],
            [r.item_revision for r in rows],
            [r.decision_id for r in rows],
            [r.revision for r in rows],
            [r.position for r in rows],
        ),
    )


def apply(conn: psycopg.Connection, generation: int, events: Iterable[Envelope]) -> None:
    """Fold the applied events of a batch and write them: what the applier calls."""
    write(conn, generation, fold(events).values())
