"""Cutover SQL (product database): the live consumer's row of a stream, locked, and
the swap of its serving generation and cursor.

Every function runs in the caller's transaction; ``processors.rebuild.cutover``
holds the transaction that pauses the live applier and orders the steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from schemas.ids import StreamId


@dataclass(frozen=True, slots=True)
class LiveCursor:
    position: int
    generation: int
    received_through: int
    """The highest position the live consumer holds any inbox row for (``position``
    if none is higher): events it has already taken, whatever their outcome."""


def lock_live(conn: psycopg.Connection, consumer: str, stream: StreamId) -> LiveCursor:
    """Lock the live consumer's progress row of ``stream`` (created at 0 if it has
    none yet) and its rows of the catalog's older epochs, which the swap moves too.
    The applier locks a stream's row first in every transaction that touches the
    stream, so holding it pauses the live applier for this stream alone.

    One lock order everywhere: the rows are locked in the order the applier locks
    them (``processors.applier.progress.lock``: by tenant, catalog, then epoch, older
    epochs first), all before anything else of the cutover. A live batch with a late
    copy of an older epoch's event locks that epoch's row, then the current one's;
    locking the current row first, and the older ones only at the swap, let each
    side hold the row the other waited for (a deadlock, one of them rolled back)."""
    conn.execute(
        "INSERT INTO stream_progress (consumer, tenant_id, catalog_id, history_epoch)"
        " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (consumer, *stream),
    )
    conn.execute(
        "SELECT 1 FROM stream_progress WHERE consumer = %s AND tenant_id = %s"
        " AND catalog_id = %s AND history_epoch <= %s ORDER BY history_epoch FOR UPDATE",
        (consumer, *stream),
    )
    row = conn.execute(
        "SELECT sp.position, sp.generation, greatest(sp.position, coalesce((SELECT max(i.position)"
        "  FROM inbox i WHERE i.consumer = sp.consumer AND i.tenant_id = sp.tenant_id"
        "  AND i.catalog_id = sp.catalog_id AND i.history_epoch = sp.history_epoch), 0))"
        " FROM stream_progress sp WHERE sp.consumer = %s AND sp.tenant_id = %s"
        " AND sp.catalog_id = %s AND sp.history_epoch = %s",
        (consumer, *stream),
    ).fetchone()
    assert row is not None
    return LiveCursor(int(row[0]), int(row[1]), int(row[2]))


def progress_of(conn: psycopg.Connection, consumer: str, stream: StreamId) -> int | None:
    row = conn.execute(
        "SELECT position FROM stream_progress WHERE consumer = %s AND tenant_id = %s"
        " AND catalog_id = %s AND history_epoch = %s",
        (consumer, *stream),
    ).fetchone()
    return None if row is None else int(row[0])


def swap(
    conn: psycopg.Connection, consumer: str, stream: StreamId, generation: int, position: int
) -> None:
    """The live row now serves ``generation`` at ``position`` (never lower than it
    was). The consumer's rows of the catalog's older epochs follow: their events are
    only ever ignored, and no row should keep the retired generation alive."""
    conn.execute(
        "UPDATE stream_progress SET generation = %s, position = greatest(position, %s),"
        " updated_at = now() WHERE consumer = %s AND tenant_id = %s AND catalog_id = %s"
        " AND history_epoch = %s",
        (generation, position, consumer, *stream),
    )
    conn.execute(
        "UPDATE stream_progress SET generation = %s, updated_at = now()"
        " WHERE consumer = %s AND tenant_id = %s AND catalog_id = %s AND history_epoch < %s",
        (generation, consumer, *stream),
    )


@dataclass(frozen=True, slots=True)
class Retired:
    parked: int
    quarantined: int


def retire_through(
    conn: psycopg.Connection, consumer: str, stream: StreamId, position: int, note: str
) -> Retired:
    """What the live consumer still held open at or below ``position``, now settled by
    the generation it serves: parked events (and their inbox rows, dependencies) are
    removed, open quarantine entries become ``superseded`` with ``note`` and their
    inbox rows removed. Progress at ``position`` already counts those positions
    done; a late copy of any of them is a duplicate by position."""
    parked = conn.execute(
        "WITH gone AS (DELETE FROM parked_event WHERE consumer = %s AND tenant_id = %s"
        " AND catalog_id = %s AND history_epoch = %s AND position <= %s RETURNING event_id),"
        " deps AS (DELETE FROM parked_dependency d USING gone"
        "  WHERE d.consumer = %s AND d.event_id = gone.event_id)"
        " DELETE FROM inbox i USING gone WHERE i.consumer = %s AND i.event_id = gone.event_id",
        (consumer, *stream, position, consumer, consumer),
    ).rowcount
    quarantined = conn.execute(
        "WITH settled AS (UPDATE quarantine SET status = 'superseded', resolved_at = now(),"
        "  resolution = %s WHERE consumer = %s AND tenant_id = %s AND catalog_id = %s"
        "  AND history_epoch = %s AND position <= %s AND status = 'open' RETURNING event_id),"
        " gone AS (DELETE FROM inbox i USING settled WHERE i.consumer = %s"
        "  AND i.event_id = settled.event_id AND i.outcome = 'quarantined')"
        " SELECT count(*) FROM settled",
        (note, consumer, *stream, position, consumer),
    ).fetchone()
    return Retired(parked, int(quarantined[0]) if quarantined else 0)


@dataclass(frozen=True, slots=True)
class Held:
    """What keeps a consumer's progress of a stream from moving on."""

    quarantine_id: int | None
    quarantine_code: str | None
    parked: int
    first_parked: int | None


def held_above(conn: psycopg.Connection, consumer: str, stream: StreamId, position: int) -> Held:
    """The first open quarantine entry above ``position`` and the parked events."""
    q = conn.execute(
        "SELECT id, error_code FROM quarantine WHERE consumer = %s AND tenant_id = %s"
        " AND catalog_id = %s AND history_epoch = %s AND status = 'open' AND position > %s"
        " ORDER BY position LIMIT 1",
        (consumer, *stream, position),
    ).fetchone()
    p = conn.execute(
        "SELECT count(*), min(position) FROM parked_event WHERE consumer = %s"
        " AND tenant_id = %s AND catalog_id = %s AND history_epoch = %s",
        (consumer, *stream),
    ).fetchone()
    assert p is not None
    return Held(
        None if q is None else int(q[0]),
        None if q is None else str(q[1]),
        int(p[0]),
        None if p[1] is None else int(p[1]),
    )


def carry_counts(
    conn: psycopg.Connection, live: str, shadow: str, stream: StreamId, after: int, through: int
) -> None:
    """Add to the live row's counts what the positions in (``after``, ``through``]
    the live consumer has no outcome of its own for ended as, so the live row counts
    every position up to its cursor once: its own outcomes, then the shadow's
    (applied; ignored, as a skip is too), and the rest as ``loaded``: positions at or below the
    export's W that the shadow never took one by one (its generation was loaded
    with their effects), which is where a live consumer still behind W at the
    cutover has positions no inbox row of either consumer names."""
    conn.execute(
        "WITH own AS (SELECT DISTINCT l.position FROM inbox l WHERE l.consumer = %(live)s"
        "  AND l.tenant_id = %(t)s AND l.catalog_id = %(c)s AND l.history_epoch = %(e)s"
        "  AND l.position > %(after)s AND l.position <= %(through)s"
        "  AND l.outcome NOT IN ('parked', 'quarantined')),"
        " taken AS (SELECT s.position, s.outcome FROM inbox s WHERE s.consumer = %(shadow)s"
        "  AND s.tenant_id = %(t)s AND s.catalog_id = %(c)s AND s.history_epoch = %(e)s"
        "  AND s.position > %(after)s AND s.position <= %(through)s"
        "  AND s.position NOT IN (SELECT position FROM own))"
        " UPDATE stream_progress SET"
        " applied_count = applied_count"
        "  + (SELECT count(*) FROM taken WHERE outcome = 'applied'),"
        " ignored_count = ignored_count"
        "  + (SELECT count(*) FROM taken"
        "   WHERE outcome IN ('ignored_stale', 'ignored_old_epoch', 'skipped')),"
        " loaded_count = loaded_count + greatest(0, %(through)s - %(after)s"
        "  - (SELECT count(*) FROM own) - (SELECT count(DISTINCT position) FROM taken))"
        " WHERE consumer = %(live)s AND tenant_id = %(t)s AND catalog_id = %(c)s"
        " AND history_epoch = %(e)s",
        {
            "shadow": shadow,
            "live": live,
            "t": stream.tenant_id,
            "c": stream.catalog_id,
            "e": stream.history_epoch,
            "after": after,
            "through": through,
        },
    )
