"""Parked events: received, acknowledged, and waiting for a dependency to apply.

Parked events belong to a consumer: a shadow rebuild's consumer and the live one
park, release and list only their own.

Every function is one statement whatever the number of events: rows travel as
binary arrays (``%b``) and ``unnest`` turns them back into rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import psycopg

from processors.applier.messages import RawMessage
from processors.applier.plan import Parked
from schemas.codec import EventCodec
from schemas.events import AggregateRef, Envelope, aggregate_key
from schemas.ids import AggregateKey


def park(
    conn: psycopg.Connection,
    consumer: str,
    parked: Sequence[tuple[Envelope, RawMessage, tuple[AggregateRef, ...]]],
) -> None:
    """Store each event's message, where it came from, and the dependencies it still
    waits for."""
    if not parked:
        return
    events = [
        (
            consumer,
            e.event_id,
            e.tenant_id,
            e.catalog_id,
            e.history_epoch,
            e.position,
            m.value or b"",
            m.topic,
            m.partition,
            m.offset,
        )
        for e, m, _ in parked
    ]
    conn.execute(
        "INSERT INTO parked_event (consumer, event_id, tenant_id, catalog_id, history_epoch,"
        ' position, value, topic, partition, "offset")'
        " SELECT * FROM unnest(%b::text[], %b::uuid[], %b::text[], %b::text[], %b::int8[],"
        " %b::int8[],"
        " %b::bytea[], %b::text[], %b::int4[], %b::int8[]) ON CONFLICT DO NOTHING",
        [list(c) for c in zip(*events, strict=True)],
    )
    dependencies = [
        (consumer, e.event_id, e.tenant_id, e.catalog_id, d.type, d.id, d.revision)
        for e, _, missing in parked
        for d in missing
    ]
    if not dependencies:
        return
    conn.execute(
        "INSERT INTO parked_dependency (consumer, event_id, tenant_id, catalog_id,"
        " aggregate_type, aggregate_id, revision)"
        " SELECT * FROM unnest(%b::text[], %b::uuid[], %b::text[], %b::text[], %b::text[],"
        " %b::text[], %b::int8[]) ON CONFLICT DO NOTHING",
        [list(c) for c in zip(*dependencies, strict=True)],
    )


@dataclass(frozen=True, slots=True)
class Waiting:
    """Which catalogs have parked events, and which have skipped revisions."""

    parked: set[tuple[str, str]]
    skipped: set[tuple[str, str]]


def catalogs_waiting(
    conn: psycopg.Connection, consumer: str, catalogs: Iterable[tuple[str, str]]
) -> Waiting:
    """Which of these (tenant, catalog) pairs have any parked event at all, and which
    have an event an operator skipped (so an event waiting on it must not park).

    Two index probes per pair in one statement, so a batch with nothing parked can
    skip ``waiting_on`` and its arrays of every aggregate key the batch names, and a
    batch that parks looks for skipped dependencies only where there are any.
    """
    wanted = sorted(set(catalogs))
    if not wanted:
        return Waiting(set(), set())
    rows = conn.execute(
        "SELECT k.t, k.c,"
        " EXISTS (SELECT 1 FROM parked_dependency d"
        "  WHERE d.consumer = %b AND d.tenant_id = k.t AND d.catalog_id = k.c),"
        " EXISTS (SELECT 1 FROM quarantine q WHERE q.consumer = %b AND q.tenant_id = k.t"
        "  AND q.catalog_id = k.c AND q.status = 'skipped' AND q.aggregate_type IS NOT NULL)"
        " FROM unnest(%b::text[], %b::text[]) AS k(t, c)",
        (consumer, consumer, [t for t, _ in wanted], [c for _, c in wanted]),
    ).fetchall()
    return Waiting(
        {(t, c) for t, c, parked, _ in rows if parked},
        {(t, c) for t, c, _, skipped in rows if skipped},
    )


def waiting_on(
    conn: psycopg.Connection, consumer: str, keys: Iterable[AggregateKey], codec: EventCodec
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
        " JOIN parked_event pe ON pe.consumer = d.consumer AND pe.event_id = d.event_id"
        " WHERE d.consumer = %b",
        [*([k[n] for k in wanted] for n in range(4)), consumer],
    ).fetchall()
    # These bytes decoded once already, before they were parked.
    return [Parked(codec.decode_value(bytes(value)), bytes(value)) for _, value in rows]


def load(
    conn: psycopg.Connection, consumer: str, event_ids: Iterable[uuid.UUID], codec: EventCodec
) -> list[Parked]:
    """The stored parked events among ``event_ids`` (absent ones are not parked)."""
    ids = list(event_ids)
    if not ids:
        return []
    rows = conn.execute(
        "SELECT value FROM parked_event WHERE consumer = %b AND event_id = ANY(%b::uuid[])"
        " ORDER BY position",
        (consumer, ids),
    ).fetchall()
    return [Parked(codec.decode_value(bytes(r[0])), bytes(r[0])) for r in rows]


def dependants(
    conn: psycopg.Connection, consumer: str, key: AggregateKey, revision: int
) -> list[tuple[uuid.UUID, int]]:
    """Parked events that wait on aggregate ``key`` at ``revision`` or lower: those
    an event of that revision would have released. Each with the revision it needs."""
    tenant, catalog, aggregate_type, aggregate_id = key
    rows = conn.execute(
        "SELECT event_id, revision FROM parked_dependency WHERE consumer = %s"
        " AND tenant_id = %s AND catalog_id = %s AND aggregate_type = %s"
        " AND aggregate_id = %s AND revision <= %s ORDER BY event_id",
        (consumer, tenant, catalog, aggregate_type, aggregate_id, revision),
    ).fetchall()
    return [(r[0], int(r[1])) for r in rows]


def unpark(conn: psycopg.Connection, consumer: str, event_ids: Iterable[uuid.UUID]) -> None:
    ids = list(event_ids)
    if not ids:
        return
    conn.execute(
        "WITH dependencies AS (DELETE FROM parked_dependency"
        "  WHERE consumer = %(consumer)s AND event_id = ANY(%(ids)b::uuid[]))"
        " DELETE FROM parked_event WHERE consumer = %(consumer)s"
        " AND event_id = ANY(%(ids)b::uuid[])",
        {"ids": ids, "consumer": consumer},
    )


def keys_named(parked: Iterable[Parked]) -> set[AggregateKey]:
    keys: set[AggregateKey] = set()
    for p in parked:
        keys.add(aggregate_key(p.event))
        keys.update(aggregate_key(p.event, d) for d in p.event.dependencies)
    return keys
