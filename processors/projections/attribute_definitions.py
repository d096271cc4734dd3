"""The attribute-definition projection: every version of every attribute, with its
type, enum values, applicability and status.

Each version is an aggregate of its own (``"<key>/<version>"``) whose events carry
its whole state: defined (draft or published), then published. A row moves only to
a higher revision, so a late draft event never unpublishes a version.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import psycopg
from psycopg.types.json import Jsonb

from processors.projections.latest import latest_of
from schemas.events import AttributeDefined, Envelope
from schemas.ids import AggregateKey, parse_definition_id

AGGREGATE = "attribute_definition"


@dataclass(frozen=True, slots=True)
class DefinitionState:
    """A whole projection row."""

    tenant_id: str
    catalog_id: str
    attribute_key: str
    version: int
    label: str
    value_type: str
    allowed_values: tuple[str, ...]
    applies_to: tuple[str, ...]
    status: str
    decision_id: uuid.UUID
    revision: int
    position: int


def load_revisions(
    conn: psycopg.Connection, generation: int, keys: Iterable[AggregateKey]
) -> dict[AggregateKey, int]:
    """The applied revision of each definition version among ``keys`` that the
    projection has: one primary-key probe per key, as the other projections do."""
    wanted = []
    for key in sorted({k for k in keys if k[2] == AGGREGATE}):
        parts = parse_definition_id(key[3])
        if parts is not None:
            wanted.append((key, *parts))
    if not wanted:
        return {}
    rows = conn.execute(
        "SELECT k.t, k.c, k.a, k.v, p.revision"
        " FROM unnest(%b::text[], %b::text[], %b::text[], %b::int8[]) AS k(t, c, a, v)"
        " CROSS JOIN LATERAL (SELECT revision FROM product_attribute_definition"
        "  WHERE generation = %b AND tenant_id = k.t AND catalog_id = k.c"
        "  AND attribute_key = k.a AND version = k.v LIMIT 1) p",
        (
            [w[0][0] for w in wanted],
            [w[0][1] for w in wanted],
            [w[1] for w in wanted],
            [w[2] for w in wanted],
            generation,
        ),
    ).fetchall()
    return {(t, c, AGGREGATE, f"{a}/{v}"): int(r) for t, c, a, v, r in rows}


def fold(events: Iterable[Envelope]) -> dict[AggregateKey, DefinitionState]:
    """One row per definition version: the batch's last revision of it."""
    return {
        key: DefinitionState(
            event.tenant_id,
            event.catalog_id,
            payload.attribute_key,
            payload.version,
            payload.label,
            payload.value_type,
            payload.allowed_values,
            payload.applies_to,
            payload.status,
            payload.decision_id,
            event.aggregate.revision,
            event.position,
        )
        for key, (event, payload) in latest_of(events, AttributeDefined).items()
    }


def write(conn: psycopg.Connection, generation: int, changes: Iterable[DefinitionState]) -> None:
    """Upsert the rows in one statement, as binary arrays; a row never moves to a lower
    revision. ``fold`` gives each version one row, so no row is touched twice."""
    rows = list(changes)
    if not rows:
        return
    conn.execute(
        "INSERT INTO product_attribute_definition (generation, tenant_id, catalog_id,"
        " attribute_key, version, label, value_type, allowed_values, applies_to, status,"
        " decision_id, revision, position)"
        " SELECT %b, * FROM unnest(%b::text[], %b::text[], %b::text[], %b::int8[],"
        " %b::text[], %b::text[], %b::jsonb[], %b::jsonb[], %b::text[], %b::uuid[],"
        " %b::int8[], %b::int8[])"
        " ON CONFLICT (generation, tenant_id, catalog_id, attribute_key, version)"
        " DO UPDATE SET label = excluded.label, value_type = excluded.value_type,"
        " allowed_values = excluded.allowed_values, applies_to = excluded.applies_to,"
        " status = excluded.status, decision_id = excluded.decision_id,"
        " revision = excluded.revision, position = excluded.position, updated_at = now()"
        " WHERE product_attribute_definition.revision < excluded.revision",
        (
            generation,
            [r.tenant_id for r in rows],
            [r.catalog_id for r in rows],
            [r.attribute_key for r in rows],
            [r.version for r in rows],
            [r.label for r in rows],
            [r.value_type for r in rows],
            [Jsonb(list(r.allowed_values)) for r in rows],
            [Jsonb(list(r.applies_to)) for r in rows],
            [r.status for r in rows],
            [r.decision_id for r in rows],
            [r.revision for r in rows],
            [r.position for r in rows],
        ),
    )


def apply(conn: psycopg.Connection, generation: int, events: Iterable[Envelope]) -> None:
    """Fold the applied events of a batch and write them: what the applier calls."""
    write(conn, generation, fold(events).values())
