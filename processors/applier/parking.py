"""Parked events: received, acknowledged, and waiting for a dependency to apply."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

import psycopg

from processors.applier.plan import AggregateKey, Parked, aggregate_key
from schemas.codec import EventCodec
from schemas.events import AggregateRef, Envelope


def park(
    conn: psycopg.Connection,
    parked: Sequence[tuple[Envelope, bytes, tuple[AggregateRef, ...]]],
) -> None:
    """Store each event's message and the dependencies it still waits for."""
    if not parked:
        return
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO parked_event (event_id, tenant_id, catalog_id, history_epoch,"
            " position, value) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            [
                (e.event_id, e.tenant_id, e.catalog_id, e.history_epoch, e.position, value)
                for e, value, _ in parked
            ],
        )
        cur.executemany(
            "INSERT INTO parked_dependency (event_id, tenant_id, catalog_id, aggregate_type,"
            " aggregate_id, revision) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            [
                (e.event_id, e.tenant_id, e.catalog_id, d.type, d.id, d.revision)
                for e, _, missing in parked
                for d in missing
            ],
        )


def waiting_on(
    conn: psycopg.Connection, keys: Iterable[AggregateKey], codec: EventCodec
) -> list[Parked]:
    """Stored parked events that wait on any of ``keys``."""
    wanted = sorted(set(keys))
    if not wanted:
        return []
    rows = conn.execute(
        "SELECT DISTINCT pe.event_id, pe.value FROM parked_dependency d"
        " JOIN unnest(%s::text[], %s::text[], %s::text[], %s::text[]) AS k(t, c, ty, i)"
        " ON d.tenant_id = k.t AND d.catalog_id = k.c AND d.aggregate_type = k.ty"
        " AND d.aggregate_id = k.i"
        " JOIN parked_event pe ON pe.event_id = d.event_id",
        (
            [k[0] for k in wanted],
            [k[1] for k in wanted],
            [k[2] for k in wanted],
            [k[3] for k in wanted],
        ),
    ).fetchall()
    # These bytes decoded once already, before they were parked.
    return [Parked(codec.decode_value(bytes(value)), bytes(value)) for _, value in rows]


def unpark(conn: psycopg.Connection, event_ids: Iterable[uuid.UUID]) -> None:
    ids = list(event_ids)
    if not ids:
        return
    conn.execute("DELETE FROM parked_dependency WHERE event_id = ANY(%s)", (ids,))
    conn.execute("DELETE FROM parked_event WHERE event_id = ANY(%s)", (ids,))


def keys_named(parked: Iterable[Parked]) -> set[AggregateKey]:
    keys: set[AggregateKey] = set()
    for p in parked:
        keys.add(aggregate_key(p.event))
        keys.update(aggregate_key(p.event, d) for d in p.event.dependencies)
    return keys
