"""What an operator's skip does to a stream: the position becomes terminal, and
whatever waited on the skipped event is set aside where an operator sees it.

A skipped event is never applied, so an event parked on it would wait for ever and
hold progress and the retention floor. Instead each such dependant becomes a
quarantine entry of its own (``DEPENDENCY_SKIPPED``) with its own retry and skip:
at the skip for those already parked, and at arrival for those that come later.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import psycopg

from processors.applier import parking, progress
from processors.applier.quarantine import (
    DEPENDENCY_NOT_APPLIED,
    DEPENDENCY_SKIPPED,
    SetAside,
    set_aside,
)
from processors.projections import registry
from schemas.ids import AggregateKey

# Names the inbox row of a skipped position whose message never decoded.
_UNDECODED = uuid.UUID("6f0f3b0e-6c1e-4a55-9d57-2a0f6d6c0b7e")


def position_event_id(stream: progress.Stream, position: int) -> uuid.UUID:
    """The inbox id of a skipped position whose event id is unknown (its message
    never decoded): derived from the stream and position, so every copy agrees."""
    tenant, catalog, epoch = stream
    return uuid.uuid5(_UNDECODED, f"{tenant}/{catalog}/{epoch}/{position}")


def mark_position(
    conn: psycopg.Connection,
    consumer: str,
    stream: progress.Stream,
    position: int,
    event_id: uuid.UUID,
) -> None:
    """Record ``position`` as ``skipped`` in the inbox (a terminal outcome), also over
    a non-terminal outcome the event has (``quarantined``, or ``parked`` when another
    copy of it parked meanwhile: that parked row goes). The caller holds the stream's
    progress lock and advances progress afterwards."""
    conn.execute(
        "INSERT INTO inbox (consumer, event_id, tenant_id, catalog_id, history_epoch,"
        " position, event_type, outcome) VALUES (%s, %s, %s, %s, %s, %s, 'unknown', 'skipped')"
        " ON CONFLICT (consumer, event_id) DO UPDATE SET outcome = 'skipped', decided_at = now()"
        " WHERE inbox.outcome IN ('parked', 'quarantined')",
        (consumer, event_id, *stream, position),
    )
    parking.unpark(conn, consumer, [event_id])


def skip_position(
    conn: psycopg.Connection, consumer: str, stream: progress.Stream, position: int
) -> int:
    """Let progress pass a position whose message never decoded; the new progress.

    In the caller's transaction: 1. lock the stream's progress row; 2. record the
    position ``skipped``; 3. advance progress. Nothing is visible before COMMIT.
    """
    locked = progress.lock(
        conn, consumer, [stream], generation=progress.bound_generation(conn, consumer)
    )
    mark_position(conn, consumer, stream, position, position_event_id(stream, position))
    now = progress.advance(
        conn, consumer, stream, locked[stream].position, progress.Counts(ignored=1)
    )
    set_aside_blocker(conn, consumer, stream, now)
    return now


def set_aside_blocker(
    conn: psycopg.Connection, consumer: str, stream: progress.Stream, position: int
) -> dict[uuid.UUID, int]:
    """Quarantine the event parked right after ``position``, the stream's progress.

    Every position up to ``position`` is terminal, and an event only depends on
    revisions written before it, so what such an event waits on was skipped, never
    applied, and will not come: it would hold progress for ever. This catches the
    dependants a skip cannot name (those of a message that never decoded). The
    caller holds the stream's progress lock; a skip's repair path only.
    """
    tenant, catalog, epoch = stream
    rows = conn.execute(
        "SELECT pe.event_id, coalesce(string_agg(d.aggregate_type || ' ' || d.aggregate_id"
        " || '@' || d.revision, ', ' ORDER BY d.aggregate_type, d.aggregate_id), 'nothing')"
        " FROM parked_event pe LEFT JOIN parked_dependency d"
        " ON d.consumer = pe.consumer AND d.event_id = pe.event_id"
        " WHERE pe.consumer = %s AND pe.tenant_id = %s AND pe.catalog_id = %s"
        " AND pe.history_epoch = %s AND pe.position = %s GROUP BY pe.consumer, pe.event_id",
        (consumer, tenant, catalog, epoch, position + 1),
    ).fetchall()
    return set_aside(
        conn,
        consumer,
        [
            SetAside(
                event_id,
                DEPENDENCY_NOT_APPLIED,
                f"parked at position {position + 1}, waiting on {waits}, while every"
                " earlier position is done: what it waits on was skipped or never"
                " decoded; retry it once that is applied, or skip it",
            )
            for event_id, waits in rows
        ],
    )


def set_aside_dependants(
    conn: psycopg.Connection,
    consumer: str,
    entry_id: int,
    key: AggregateKey,
    revision: int,
    generation: int,
) -> dict[uuid.UUID, int]:
    """Quarantine every parked event the skipped event (``key`` at ``revision``, entry
    ``entry_id``) would have released; returns their entry ids.

    Only dependencies still unmet count: one already met by an applied revision is
    not what the event waits on. The caller holds the stream's progress lock.
    """
    waiting = parking.dependants(conn, consumer, key, revision)
    if not waiting:
        return {}
    applied = registry.load_revisions(conn, generation, [key]).get(key, 0)
    _, _, aggregate_type, aggregate_id = key
    return set_aside(
        conn,
        consumer,
        [
            SetAside(
                event_id,
                DEPENDENCY_SKIPPED,
                waits_on_skipped(aggregate_type, aggregate_id, needed, entry_id),
            )
            for event_id, needed in waiting
            if needed > applied
        ],
    )


def waits_on_skipped(aggregate_type: str, aggregate_id: str, revision: int, entry: int) -> str:
    return (
        f"waits on {aggregate_type} {aggregate_id} at revision {revision}, which an operator"
        f" skipped (quarantine entry #{entry}); retry it once that aggregate is applied at"
        " that revision or later, or skip it"
    )


def skipped_revisions(
    conn: psycopg.Connection, consumer: str, keys: Iterable[AggregateKey]
) -> dict[AggregateKey, tuple[int, int]]:
    """For each of ``keys`` with a skipped event: the highest skipped revision and the
    entry that skipped it. One statement, on the partial index of skipped entries."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    rows = conn.execute(
        "SELECT q.tenant_id, q.catalog_id, q.aggregate_type, q.aggregate_id,"
        " max(q.revision), (array_agg(q.id ORDER BY q.revision DESC))[1] FROM quarantine q"
        " JOIN unnest(%b::text[], %b::text[], %b::text[], %b::text[]) AS k(t, c, ty, i)"
        " ON q.tenant_id = k.t AND q.catalog_id = k.c AND q.aggregate_type = k.ty"
        " AND q.aggregate_id = k.i"
        " WHERE q.consumer = %b AND q.status = 'skipped' AND q.aggregate_type IS NOT NULL"
        " GROUP BY 1, 2, 3, 4",
        [*[[k[n] for k in wanted] for n in range(4)], consumer],
    ).fetchall()
    return {(t, c, ty, i): (int(rev), int(entry)) for t, c, ty, i, rev, entry in rows}
