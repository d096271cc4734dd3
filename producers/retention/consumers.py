"""Registered consumers and their durable progress.

A consumer registers per stream and reports the greatest position through which it
has durably applied every event. The report only ever moves forward: a lower one is
accepted and ignored, so a late or repeated report cannot release events again.
Only an operator removes a consumer (``deregister``); a lagging one keeps holding
the retention floor for as long as it lags.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from db import retention as sql
from producers.retention.exceptions import ConsumerNotFound, PositionBeyondCommitted
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


def report(conn: psycopg.Connection, stream: StreamId, consumer_id: str, position: int) -> int:
    """Record the consumer's durable progress; returns the progress now held.

    1. refuse a position above the committed cursor (read without locking it);
    2. raise a registered consumer's progress (``GREATEST``: a lower report changes
       nothing). This needs no retention lock: raising progress can only raise
       the floor, so a pruner that read the old value merely prunes less;
    3. if the consumer is not registered, register it under the retention lock as
       ``register`` does and raise it then;
    4. commit.
    A crash before 4 leaves the previous progress, which only retains more.
    """
    with conn.transaction():
        committed = sql.committed_position(conn, stream)
        if position > committed:
            raise PositionBeyondCommitted(
                f"{consumer_id} reported {position} on {stream}, committed is {committed}"
            )
        held = sql.raise_progress(conn, stream, consumer_id, position)
        if held is None:
            sql.lock_retention(conn, stream)
            sql.ensure_consumer(conn, stream, consumer_id)
            held = sql.raise_progress(conn, stream, consumer_id, position)
            assert held is not None
    return held


def deregister(conn: psycopg.Connection, stream: StreamId, consumer_id: str) -> None:
    """Remove a consumer (an operator's decision, never automatic).

    1. take the retention lock; 2. delete the row; 3. commit. The next prune pass
    may then go past the consumer's progress.
    """
    with conn.transaction():
        sql.lock_retention(conn, stream)
        if not sql.delete_consumer(conn, stream, consumer_id):
            raise ConsumerNotFound(f"no consumer {consumer_id!r} registered on {stream}")
