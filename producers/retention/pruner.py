"""The pruner: deletes the retained events nobody can need any more.

Per stream it deletes a contiguous prefix of the outbox: only rows the relay has
published, committed longer ago than the retention age, and at or below the
retention floor, the lowest of every registered consumer's reported progress (0
for one that never reported) and every live lease's pin. A standing consumer
holds every stream it has no registration on at 0, so a stream nobody has reported
on yet is kept for it. It never removes a consumer or a lease; a lagging consumer
holds the floor until an operator deregisters it.

A fenced stream (its history epoch abandoned after a restore, ``db.resolver.fencing``) is
kept as history, never relabelled: for ``GAPLESS_FENCED_RETENTION_SECONDS`` from
its ``fenced_at`` (by the database clock) no row of it is pruned, published or not,
so what the abandoned history said stays readable in the outbox while an operator
looks into the restore. After that period every row of it goes, in bounded batches
as the live pruning, regardless of its consumers' progress (on a dead epoch it never
moves again), standing consumers and leases (none can be renewed or advanced on a
fenced epoch): they must not pin it for ever. Its ``stream_retention`` row stays
(``pruned_through`` ends at the end of its history, so a first report below it is
refused as needing a rebuild), and so do its consumer registrations and leases, as
records that hold nothing any more; the fenced cursor row itself is never touched
(it keeps writers out).
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from db.resolver import retention as sql
from db.resolver.outbox import published_position
from db.settings import FENCED_RETENTION_SECONDS
from producers.retention.rules import (
    BATCH_SIZE,
    PruneStep,
    consumer_holders,
    fenced_step,
    lease_holder,
    limit_by_age,
    prune_step,
    retention_floor,
)
from schemas.ids import StreamId


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    age_seconds: float
    batch_size: int
    fenced_seconds: float = FENCED_RETENTION_SECONDS


@dataclass(frozen=True, slots=True)
class StreamPruned:
    """One stream's pass: rows deleted, where it stands and what stopped it."""

    stream: StreamId
    deleted: int
    pruned_through: int
    limited_by: str
    batches: int


def prune_batch(
    conn: psycopg.Connection, stream: StreamId, policy: RetentionPolicy
) -> tuple[int, int, str]:
    """Prune at most one batch of the stream in one transaction.

    Returns (rows deleted, pruned-through position, what limited the batch).

    1. take the stream's retention-control lock, reading ``pruned_through`` P;
    2. read whether the stream is fenced (its cursor row, unlocked). Fenced: the
       end of the batch is P while the stream is kept as history, else the lowest
       of its history's end and P + batch size; go to 5. Live: take the standing
       lock shared (a declaration waits for this batch) and go on;
    3. read the floor under the locks: registered consumers' progress, 0 for each
       standing consumer not registered on the stream, the pins of leases neither
       released nor expired (by the database clock), and the relay's published
       position; the end of the batch is the lowest of the floor, the published
       position and P + batch size;
    4. cut it before the first row in range younger than the retention age;
    5. delete the outbox rows in (P, end] and set ``pruned_through`` to end;
    6. commit, releasing the lock.
    A crash before 6 rolls everything back: no row deleted, ``pruned_through``
    unchanged. After 6 the rows at or below ``pruned_through`` are gone and every
    row above it is still there, so a crash between two batches leaves a consistent
    stream that the next pass continues; a fenced stream's end and period do not
    change, so the next pass takes up exactly where this one stopped.
    A batch that read the stream live at 2 just before a fence committed may still
    delete, after the fence, what the live rule allowed it (published rows past
    every holder and older than the retention age); from the next batch on the
    stream is kept whole until its period is over.
    """
    with conn.transaction():
        pruned = sql.lock_retention(conn, stream)
        fence = sql.fence_state(conn, stream, policy.fenced_seconds)
        if fence is not None:
            step = fenced_step(pruned, fence.history_end, fence.kept, policy.batch_size)
        else:
            step = _live_step(conn, stream, pruned, policy)
        if step.through <= pruned:
            return 0, pruned, step.limited_by
        deleted = sql.delete_range(conn, stream, pruned, step.through)
        sql.set_pruned_through(conn, stream, step.through)
    return deleted, step.through, step.limited_by


def _live_step(
    conn: psycopg.Connection, stream: StreamId, pruned: int, policy: RetentionPolicy
) -> PruneStep:
    """Steps 2-4 of ``prune_batch`` for a live stream."""
    sql.lock_standing_shared(conn)
    holders = consumer_holders(sql.consumers(conn, stream), sql.standing_consumers(conn))
    holders += [
        lease_holder(str(lease.lease_id), lease.holder, lease.pinned_position)
        for lease in sql.unreleased_leases(conn, stream)
        if not lease.expired
    ]
    published = published_position(conn, stream)
    step = prune_step(pruned, retention_floor(holders), published, policy.batch_size)
    if step.through > pruned:
        young = sql.first_younger_than(conn, stream, pruned, step.through, policy.age_seconds)
        step = limit_by_age(step, young)
    return step


def _require_idle(conn: psycopg.Connection) -> None:
    """Each batch must commit on its own: inside a caller's transaction it would only
    be a savepoint, and the lock and the deletes would last until the caller's end."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise RuntimeError("the pruner needs a connection outside any transaction")


def prune_stream(
    conn: psycopg.Connection, stream: StreamId, policy: RetentionPolicy
) -> StreamPruned:
    """Prune batches until one stops short of a full batch (the lock is released
    between batches, so registrations and leases are never kept waiting long)."""
    _require_idle(conn)
    deleted = batches = 0
    while True:
        count, through, limited_by = prune_batch(conn, stream, policy)
        deleted += count
        batches += 1 if count else 0
        if limited_by != BATCH_SIZE or count == 0:
            return StreamPruned(stream, deleted, through, limited_by, batches)


def prune_all(conn: psycopg.Connection, policy: RetentionPolicy) -> list[StreamPruned]:
    """One pass over every live stream with published events above its pruned
    position, and every fenced stream whose period is over with rows left."""
    _require_idle(conn)
    with conn.transaction():
        streams = sql.prunable_streams(conn, policy.fenced_seconds)
    return [prune_stream(conn, stream, policy) for stream in streams]
