"""Rebuild leases: a rebuild pins the retained events it still needs.

A lease is created pinned at the stream's pruned-through position, so every event
the rebuild may need later is still there; the rebuild then advances the pin (to
its export's cursor, and on as it catches up), renews the lease while it works and
releases it after cutover. While a lease is neither expired nor released, nothing
above its pin is pruned. An expired lease is never revived: once it has expired the
pruner may have passed its pin, so renewing it would promise events that are gone.

Every change to a lease runs under the stream's retention-control lock, so it is
ordered with each prune batch: a renewal either lands before the batch reads the
leases (and is honoured) or after it (and finds the lease expired).
"""

from __future__ import annotations

import uuid

import psycopg

from db.resolver import retention as sql
from db.resolver.retention import LeaseRow
from producers.retention.exceptions import (
    EpochNotCurrent,
    LeaseExpired,
    LeaseNotFound,
    LeaseReleased,
    PositionBeyondCommitted,
)
from schemas.ids import StreamId


def require_current_epoch(stream: StreamId, current_epoch: int | None) -> None:
    """Leases and exports only serve the current history epoch (from the control DB)."""
    if current_epoch != stream.history_epoch:
        current = "none" if current_epoch is None else str(current_epoch)
        raise EpochNotCurrent(
            f"history epoch {stream.history_epoch} of {stream.tenant_id}/{stream.catalog_id}"
            f" is not current (current: {current})"
        )


def require_usable(lease: LeaseRow) -> None:
    """A released or expired lease pins nothing and cannot be used again."""
    if lease.released_at is not None:
        raise LeaseReleased(f"lease {lease.lease_id} was released at {lease.released_at}")
    if lease.expired:
        raise LeaseExpired(f"lease {lease.lease_id} expired at {lease.expires_at}")


def find(conn: psycopg.Connection, lease_id: uuid.UUID) -> LeaseRow:
    lease = sql.get_lease(conn, lease_id)
    if lease is None:
        raise LeaseNotFound(f"no lease {lease_id}")
    return lease


def create(conn: psycopg.Connection, stream: StreamId, holder: str, ttl_seconds: int) -> LeaseRow:
    """Create a lease pinned at the stream's pruned-through position.

    1. take the stream's retention-control lock, reading ``pruned_through`` P;
    2. insert the lease pinned at P, expiring ``ttl_seconds`` from now;
    3. commit, releasing the lock.
    A crash before 3 leaves no lease. Once 3 returns, every event above P stays
    until the lease expires, is released or its pin moves; commit before reading
    any snapshot the events must follow.
    """
    with conn.transaction():
        pruned = sql.lock_retention(conn, stream)
        return sql.insert_lease(conn, stream, uuid.uuid4(), holder, pruned, ttl_seconds)


def locked(conn: psycopg.Connection, lease_id: uuid.UUID) -> LeaseRow:
    """Take the retention lock of the lease's stream, then read the lease under it
    (a stream never changes, so reading it before the lock is safe)."""
    stream = find(conn, lease_id).stream
    sql.lock_retention(conn, stream)
    return find(conn, lease_id)


def renew(conn: psycopg.Connection, lease_id: uuid.UUID, ttl_seconds: int | None) -> LeaseRow:
    """Extend a live lease to expire ``ttl_seconds`` (default: its last TTL) from now.

    1. take the retention lock of the lease's stream; 2. refuse a released or
    expired lease (410); 3. move ``expires_at``; 4. commit.
    """
    with conn.transaction():
        lease = locked(conn, lease_id)
        require_usable(lease)
        return sql.extend_lease(conn, lease_id, ttl_seconds or lease.ttl_seconds)


def advance(conn: psycopg.Connection, lease_id: uuid.UUID, position: int) -> LeaseRow:
    """Move the pin forward to ``position`` (a lower one leaves it where it is).

    1. take the retention lock; 2. refuse a released or expired lease (410) and a
    position above the committed cursor; 3. raise the pin; 4. commit. From then on
    the pruner may go up to the new pin.
    """
    with conn.transaction():
        lease = locked(conn, lease_id)
        require_usable(lease)
        committed = sql.committed_position(conn, lease.stream)
        if position > committed:
            raise PositionBeyondCommitted(
                f"cannot pin lease {lease_id} at {position}: {lease.stream} committed {committed}"
            )
        return sql.raise_pin(conn, lease_id, position)


def release(conn: psycopg.Connection, lease_id: uuid.UUID) -> None:
    """Release the lease (idempotent; an expired lease may be released too)."""
    with conn.transaction():
        locked(conn, lease_id)
        sql.mark_released(conn, lease_id)
