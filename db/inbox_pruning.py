"""The SQL of inbox pruning (product database): which streams may be pruned how far,
and one bounded batch of deletions.

An inbox row is one consumer's duplicate filter for one event id. At or below that
consumer's durable contiguous progress in the stream every position is decided, so a
later copy of such an event is a duplicate by its position alone (the applier drops
it without a row). The rows are kept for a retention window anyway and pruned after
it, so the table does not grow without bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

Stream = tuple[str, str, int]


@dataclass(frozen=True, slots=True)
class PruneBatch:
    looked_at: int
    deleted: int


def progress_floors(conn: psycopg.Connection) -> dict[tuple[str, Stream], int]:
    """Per consumer and stream, its durable progress (the inbox is kept per consumer:
    a row may go once its own consumer has passed its position). Streams a consumer
    has not progressed in are left out."""
    rows = conn.execute(
        "SELECT consumer, tenant_id, catalog_id, history_epoch, position FROM stream_progress"
        " WHERE position > 0"
    ).fetchall()
    return {(q, (t, c, int(e))): int(p) for q, t, c, e, p in rows}


def prune_batch(
    conn: psycopg.Connection,
    consumer: str,
    stream: Stream,
    floor: int,
    older_than_seconds: float,
    limit: int,
) -> PruneBatch:
    """Delete, in one statement, what may go of the ``limit`` lowest inbox rows of
    ``stream`` at or below ``floor``: those decided more than ``older_than_seconds``
    ago, never a ``parked`` one (an event that still waits is never at or below
    progress anyway, since progress stops before it).

    The candidates are read in position order through ``inbox_stream_position_idx``,
    so a batch costs at most ``limit`` index entries however large the inbox is.
    Lower positions were decided earlier, so when a batch deletes fewer rows than it
    looked at, the rows above it are still inside the window: the caller stops there.
    Run in autocommit; a crash loses nothing but the batch not yet deleted.
    """
    tenant, catalog, epoch = stream
    row = conn.execute(
        "WITH candidate AS ("
        " SELECT event_id, outcome, decided_at FROM inbox"
        " WHERE consumer = %(consumer)s AND tenant_id = %(tenant)s AND catalog_id = %(catalog)s"
        " AND history_epoch = %(epoch)s AND position <= %(floor)s"
        " ORDER BY position LIMIT %(limit)s),"
        " gone AS ("
        " DELETE FROM inbox USING candidate WHERE inbox.consumer = %(consumer)s"
        " AND inbox.event_id = candidate.event_id"
        " AND candidate.outcome <> 'parked'"
        " AND candidate.decided_at < now() - make_interval(secs => %(age)s)"
        " RETURNING 1)"
        " SELECT (SELECT count(*) FROM candidate), (SELECT count(*) FROM gone)",
        {
            "consumer": consumer,
            "tenant": tenant,
            "catalog": catalog,
            "epoch": epoch,
            "floor": floor,
            "limit": limit,
            "age": older_than_seconds,
        },
    ).fetchone()
    assert row is not None
    return PruneBatch(int(row[0]), int(row[1]))
