"""Parked events: received, acknowledged, and waiting for a dependency to apply.

Every function is one statement whatever the number of events: rows travel as
binary arrays (``%b``) and ``unnest`` turns them back into rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

import psycopg

from processors.applier.plan import Parked
from schemas.codec import EventCodec
from schemas.events import AggregateRef, Envelope, aggregate_key
from schemas.ids import AggregateKey


def park(
    conn: psycopg.Connection,
    parked: Sequence[tuple[Envelope, bytes, tuple[AggregateRef, ...]]],
) -> None:
    """Store each event's message and the dependencies it still waits for."""
    if not parked:
        return
    events = [
        (e.event_id, e.tenant_id, e.catalog_id, e.history_epoch, e.position, value)
        for e, value, _ in parked
    ]
    conn.execute(
        "INSERT INTO parked_event (event_id, tenant_id, catalog_id, history_epoch,"
        " position, value)"
        " SELECT * FROM unnest(%b::uuid[], %b::text[], %b::text[], %b::int8[], %b::int8[],"
        " %b::bytea[]) ON CONFLICT DO NOTHING",
        [list(c) for c in zip(*events, strict=True)],
    )
    dependencies = [
        (e.event_id, e.tenant_id, e.catalog_id, d.type, d.id, d.revision)
        for e, _, missing in parked
        for d in missing
    ]
    if not dependencies:
        return
    conn.execute(
        "INSERT INTO parked_dependency (event_id, tenant_id, catalog_id, aggregate_type,"
        " aggregate_id, revision)"
        " SELECT * FROM unnest(%b::uuid[], %b::text[], %b::text[], %b::text[], %b::text[],"
        " %b::int8[]) ON CONFLICT DO NOTHING",
        [list(c) for c in zip(*dependencies, strict=True)],
    )


def catalogs_with_parked(
    conn: psycopg.Connection, catalogs: Iterable[tuple[str, str]]
) -> set[tuple[str, str]]:
    """Which of these (tenant, catalog) pairs have any parked event at all.

    One index probe per pair, so a batch with nothing parked can skip ``waiting_on``
    and its arrays of every aggregate key the batch names.
    """
    wanted = sorted(set(catalogs))
    if not wanted:
        return set()
    rows = conn.execute(
        "SELECT k.t, k.c FROM unnest(%b::text[], %b::text[]) AS k(t, c)"
        " WHERE EXISTS (SELECT 1 FROM parked_dependency d"
        "  WHERE d.tenant_id = k.t AND d.catalog_id = k.c)",
        ([t for t, _ in wanted], [c for _, c in wanted]),
    ).fetchall()
    return {(t, c) for t, c in rows}


def waiting_on(
    conn: psycopg.Connection, keys: Iterable[AggregateKey], codec: EventCodec
) -> list[Parked]:
    """Stored parked events that wait on any of ``keys``."""
    wanted = sorted(set(keys))
    if not wanted:
        return []
    rows = conn.execute(
        "SELECT DISTINCT pe.event_id, pe.value FROM parked_dependency d"
        " JOIN unnest(%b::text[], %b::text[], %b::text[], %b::text[]) AS k(t, c, ty, i)"
        " ON d.tenant_id = k.t AND d.catalog_id = k.c AND d.aggregate_type = k.ty"
        " AND d.aggregate_id = k.i"
        " JOIN parked_event pe ON pe.event_id = d.event_id",
        [[k[n] for k in wanted] for n in range(4)],
    ).fetchall()
    # These bytes decoded once already, before they were parked.
    return [Parked(codec.decode_value(bytes(value)), bytes(value)) for _, value in rows]


def unpark(conn: psycopg.Connection, event_ids: Iterable[uuid.UUID]) -> None:
    ids = list(event_ids)
    if not ids:
        return
    conn.execute(
        "WITH dependencies AS ("
        " DELETE FROM parked_dependency WHERE event_id = ANY(%(ids)b::uuid[]))"
        " DELETE FROM parked_event WHERE event_id = ANY(%(ids)b::uuid[])",
        {"ids": ids},
    )


def keys_named(parked: Iterable[Parked]) -> set[AggregateKey]:
    keys: set[AggregateKey] = set()
    for p in parked:
        keys.add(aggregate_key(p.event))
        keys.update(aggregate_key(p.event, d) for d in p.event.dependencies)
    return keys
