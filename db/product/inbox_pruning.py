"""The SQL of inbox pruning (product database): which streams may be pruned how far,
and one bounded batch of deletions.

An inbox row is one consumer's duplicate filter for one event id. At or below that
consumer's durable contiguous progress in the stream every position is decided, so a
later copy of such an event is a duplicate by its position alone (the applier drops
it without a row). The rows are kept for a retention window anyway and pruned after
it, so the table does not grow without bound.

A superseded epoch's stream (older than an epoch whose fence the product side has
settled, ``superseded_epoch``) is history and has a rule of its own: its inbox rows,
the audit of every delivery of it (``ignored_old_epoch`` ones included, also those
above progress that the live rule never reaches), are kept whole for the fenced
retention period from the settlement, and each at least that long from its own
decision (a late delivery's audit too); then they go in bounded batches, parked ones
with their parking rows (an old-epoch event is never applied any more). The
stream's progress row stays: it is one row per consumer and stream, it keeps late
copies at or below it recognised as duplicates, and its counts summarise what the
pruned audit said.
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
        "SELECT consumer, tenant_id, catalog_id, history_epoch, position FROM stream_progress p"
        f" WHERE position > 0 AND NOT {_SUPERSEDED}"
    ).fetchall()
    return {(q, (t, c, int(e))): int(p) for q, t, c, e, p in rows}


# A stream of ``p`` (a progress row) whose epoch is below a settled fence's.
_SUPERSEDED = (
    "EXISTS (SELECT 1 FROM superseded_epoch s WHERE s.tenant_id = p.tenant_id"
    " AND s.catalog_id = p.catalog_id AND s.epoch > p.history_epoch)"
)


def superseded_catalogs(conn: psycopg.Connection) -> dict[tuple[str, str], int]:
    """Per catalog, the newest epoch whose fence the product side has settled: every
    epoch below it is history here."""
    rows = conn.execute(
        "SELECT tenant_id, catalog_id, max(epoch) FROM superseded_epoch"
        " GROUP BY tenant_id, catalog_id"
    ).fetchall()
    return {(t, c): int(e) for t, c, e in rows}


def old_epoch_streams(conn: psycopg.Connection, fenced_seconds: float) -> list[tuple[str, Stream]]:
    """Per consumer, the superseded streams whose fenced retention period since the
    first settlement superseding them is over (by the database clock)."""
    rows = conn.execute(
        "SELECT consumer, tenant_id, catalog_id, history_epoch FROM stream_progress p"
        " WHERE (SELECT min(s.settled_at) FROM superseded_epoch s WHERE s.tenant_id = p.tenant_id"
        "  AND s.catalog_id = p.catalog_id AND s.epoch > p.history_epoch)"
        "  < now() - make_interval(secs => %s)"
        " ORDER BY 1, 2, 3, 4",
        (fenced_seconds,),
    ).fetchall()
    return [(q, (t, c, int(e))) for q, t, c, e in rows]


@dataclass(frozen=True, slots=True)
class OldEpochBatch:
    looked_at: int
    deleted: int
    last_position: int | None
    """The highest position looked at: the next batch starts after it."""


def prune_old_epoch_batch(
    conn: psycopg.Connection,
    consumer: str,
    stream: Stream,
    after: int,
    fenced_seconds: float,
    limit: int,
) -> OldEpochBatch:
    """Delete, in one statement, what may go of the ``limit`` lowest inbox rows of a
    superseded ``stream`` above position ``after``: every row decided more than
    ``fenced_seconds`` ago, whatever its outcome and its position against progress;
    a parked one with its ``parked_event`` and ``parked_dependency`` rows.

    The candidates are read in position order through ``inbox_stream_position_idx``,
    so a batch costs at most ``limit`` index entries. Decision times do not follow
    positions here (a late delivery's audit can sit below older rows), so the caller
    pages on by position (``after``) instead of stopping at the first young row. Run
    in autocommit: a crash or a killed connection rolls the statement back whole and
    leaves the rest, this batch included, to the next pass.
    """
    tenant, catalog, epoch = stream
    row = conn.execute(
        "WITH candidate AS ("
        " SELECT event_id, position, decided_at FROM inbox"
        " WHERE consumer = %(consumer)s AND tenant_id = %(tenant)s AND catalog_id = %(catalog)s"
        " AND history_epoch = %(epoch)s AND position > %(after)s"
        " ORDER BY position LIMIT %(limit)s),"
        " expired AS (SELECT event_id FROM candidate"
        "  WHERE decided_at < now() - make_interval(secs => %(age)s)),"
        " deps AS (DELETE FROM parked_dependency d USING expired x"
        "  WHERE d.consumer = %(consumer)s AND d.event_id = x.event_id),"
        " parked AS (DELETE FROM parked_event p USING expired x"
        "  WHERE p.consumer = %(consumer)s AND p.event_id = x.event_id),"
        " gone AS (DELETE FROM inbox i USING expired x"
        "  WHERE i.consumer = %(consumer)s AND i.event_id = x.event_id RETURNING 1)"
        " SELECT (SELECT count(*) FROM candidate), (SELECT count(*) FROM gone),"
        " (SELECT max(position) FROM candidate)",
        {
            "consumer": consumer,
            "tenant": tenant,
            "catalog": catalog,
            "epoch": epoch,
            "after": after,
            "limit": limit,
            "age": fenced_seconds,
        },
    ).fetchone()
    assert row is not None
    return OldEpochBatch(int(row[0]), int(row[1]), None if row[2] is None else int(row[2]))


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
