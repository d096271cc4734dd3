"""Registered consumers, standing consumers and their durable progress.

A consumer registers per stream and reports the greatest position through which it
has durably applied every event. The report only ever moves forward: a lower one is
accepted and ignored, so a late or repeated report cannot release events again.
Only an operator removes a consumer (``deregister``); a lagging one keeps holding
the retention floor for as long as it lags.

A consumer whose progress is still unknown (it never reported) and reports a
position below the stream's pruned-through position needs events that are gone:
the report is refused with ``CONSUMER_NEEDS_REBUILD`` and the refusal is recorded on
its row, which keeps holding what is still retained until it is rebuilt (a report
at or above pruned-through clears it) or an operator deregisters it.

A standing consumer holds every stream, also streams it has never reported on, so
events nobody has seen yet (all their messages lost, or a consumer deployed later)
are kept for it from the stream's first event.

A report above the committed cursor is refused (``POSITION_BEYOND_COMMITTED``): a
consumer only ever sees committed positions, so the resolver's history went back
under it (a restore nobody fenced). Given the control database, the refusal flags
the stream rewound there (``db.control.epochs.flag_rewound``), which holds its writes until
``gapless fence-epoch`` fences it; the message names that command.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from db.control.epochs import REPORT_BEYOND_COMMITTED, EpochSource
from db.resolver import retention as sql
from producers.retention.exceptions import (
    ConsumerNeedsRebuild,
    ConsumerNotFound,
    PositionBeyondCommitted,
)
from schemas.ids import StreamId


@dataclass(frozen=True, slots=True)
class Registration:
    consumer_id: str
    reported_position: int | None
    # Events above this position are retained for the consumer from now on; a
    # consumer that needs anything at or below it must start from a snapshot.
    pruned_through: int


def register(conn: psycopg.Connection, stream: StreamId, consumer_id: str) -> Registration:
    """Register the consumer (idempotent).

    1. take the stream's retention-control lock, reading ``pruned_through``;
    2. insert the consumer row if it is missing (progress unknown: holds the floor
       at 0);
    3. commit, which releases the lock.
    A crash before 3 leaves nothing; once 3 returns, no pruner deletes above
    ``pruned_through`` until the consumer reports progress or is deregistered.
    """
    with conn.transaction():
        pruned = sql.lock_retention(conn, stream)
        row = sql.ensure_consumer(conn, stream, consumer_id)
    return Registration(row.consumer_id, row.reported_position, pruned)


def report(
    conn: psycopg.Connection,
    stream: StreamId,
    consumer_id: str,
    position: int,
    epochs: EpochSource | None = None,
) -> int:
    """Record the consumer's durable progress; returns the progress now held.

    1. refuse a position above the committed cursor (read without locking it),
       flagging the stream rewound through ``epochs`` (its own statement on the
       control database, committed even though this refusal changes nothing here);
    2. raise the progress of a consumer that has reported before (``GREATEST``: a
       lower report changes nothing). This needs no retention lock: raising
       progress can only raise the floor, so a pruner that read the old value
       merely prunes less;
    3. otherwise (not registered, or never reported) take the retention lock,
       reading pruned-through P, and register the consumer as ``register`` does;
    4. if ``position`` < P, record the refusal on the row; else raise progress;
    5. commit; after a refusal, raise ``ConsumerNeedsRebuild``.
    A crash before 5 leaves the previous progress (or no row), which only retains
    more. A refused consumer's row holds the floor at 0, so nothing more of the
    stream is pruned until it is rebuilt or deregistered.
    """
    refused = None
    with conn.transaction():
        committed = sql.committed_position(conn, stream)
        if position > committed:
            refusal = f"{consumer_id} reported {position} on {stream}, committed is {committed}"
            raise PositionBeyondCommitted(refusal + _flag_rewound(epochs, stream, refusal))
        held = sql.raise_progress(conn, stream, consumer_id, position, known_only=True)
        if held is None:
            pruned = sql.lock_retention(conn, stream)
            sql.ensure_consumer(conn, stream, consumer_id)
            if position < pruned:
                refused = sql.mark_needs_rebuild(conn, stream, consumer_id, position)
            else:
                held = sql.raise_progress(conn, stream, consumer_id, position)
    if refused is not None:
        raise ConsumerNeedsRebuild(
            f"{consumer_id} reported {position} on {stream} as its first progress, but"
            f" events through {pruned} are pruned: rebuild the consumer from a snapshot"
            " (it then reports at or above the pruned position), or deregister it with"
            " `gapless consumers deregister`"
        )
    assert held is not None
    return held


def _flag_rewound(epochs: EpochSource | None, stream: StreamId, refusal: str) -> str:
    """Flag ``stream`` rewound (when it is its catalog's current epoch) and say so."""
    if epochs is None:
        return ""
    flag = epochs.flag_rewound(*stream, REPORT_BEYOND_COMMITTED, refusal)
    if flag is None:
        return ""
    return (
        ": the stream's history went back without a fence (a restore?), so it takes no"
        f" writes until it is fenced: {flag.fix}"
    )


def deregister(conn: psycopg.Connection, stream: StreamId, consumer_id: str) -> None:
    """Remove a consumer (an operator's decision, never automatic).

    1. take the retention lock; 2. delete the row; 3. commit. The next prune pass
    may then go past the consumer's progress.
    """
    with conn.transaction():
        sql.lock_retention(conn, stream)
        if not sql.delete_consumer(conn, stream, consumer_id):
            raise ConsumerNotFound(f"no consumer {consumer_id!r} registered on {stream}")


def declare_standing(conn: psycopg.Connection, consumer_id: str, declared_by: str) -> bool:
    """Make ``consumer_id`` hold every stream (idempotent); False if it already stood.

    1. take the standing lock exclusively, which waits for prune batches in flight;
    2. insert the row; 3. commit. A crash before 3 leaves nothing. From 3 on every
    batch reads the row under the shared lock: a stream the consumer has no row on
    is held at 0 for it. What was pruned before 3 stays pruned; a first report
    below it is refused (``CONSUMER_NEEDS_REBUILD``).
    """
    with conn.transaction():
        sql.lock_standing_exclusive(conn)
        return sql.insert_standing(conn, consumer_id, declared_by)


def retire_standing(conn: psycopg.Connection, consumer_id: str) -> None:
    """Stop ``consumer_id`` holding streams it has not registered on (an operator's
    decision). Its per-stream registrations stay until deregistered.

    1. take the standing lock exclusively; 2. delete the row; 3. commit.
    """
    with conn.transaction():
        sql.lock_standing_exclusive(conn)
        if not sql.delete_standing(conn, consumer_id):
            raise ConsumerNotFound(f"{consumer_id!r} is not a standing consumer")
