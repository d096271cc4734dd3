"""Retained events: pages of outbox rows for live consumers closing gaps and for
rebuilds catching up after their export.

A page is read in one REPEATABLE READ snapshot together with ``pruned_through``
and, for exports, the lease: what the snapshot shows as retained is exactly what
the page returns, with no position skipped by a pruner committing meanwhile.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import psycopg

from db.resolver import retention as sql
from db.resolver.retained_events import EventRow, begin_snapshot, read_events
from producers.retention import leases
from producers.retention.exceptions import CursorPruned, LeaseEpochMismatch
from schemas.ids import StreamId

DEFAULT_PAGE = 500
MAX_PAGE = 5000


@dataclass(frozen=True, slots=True)
class EventPage:
    stream: StreamId
    committed_position: int
    pruned_through: int
    events: list[EventRow]


def _page(conn: psycopg.Connection, stream: StreamId, after: int, limit: int) -> EventPage:
    pruned = sql.pruned_through(conn, stream)
    if after < pruned:
        raise CursorPruned(
            f"{stream}: events through {pruned} are pruned, cannot read after {after}"
        )
    committed = sql.committed_position(conn, stream)
    return EventPage(stream, committed, pruned, read_events(conn, stream, after, limit))


def live_page(conn: psycopg.Connection, stream: StreamId, after: int, limit: int) -> EventPage:
    """Up to ``limit`` events after ``after``; 410 ``CURSOR_PRUNED`` if some of them
    were already pruned (``after`` below ``pruned_through``)."""
    with conn.transaction():
        begin_snapshot(conn)
        return _page(conn, stream, after, limit)


def export_page(
    conn: psycopg.Connection,
    lease_id: uuid.UUID,
    history_epoch: int,
    after: int,
    limit: int,
    current_epoch: int | None,
) -> EventPage:
    """Events after a rebuild's export cursor, under its lease.

    In one snapshot: the lease must be live (410 ``LEASE_EXPIRED`` /
    ``LEASE_RELEASED``) and ``after`` not pruned (410 ``CURSOR_PRUNED``). A lease
    live at the database clock when checked was live when the snapshot began, so no
    pruner could have passed its pin in anything this snapshot sees. The epoch named
    by the request must be the lease's and the current one (410
    ``EPOCH_NOT_CURRENT``; ``current_epoch`` comes from the control database).
    """
    with conn.transaction():
        begin_snapshot(conn)
        lease = leases.find(conn, lease_id)
        if lease.stream.history_epoch != history_epoch:
            raise LeaseEpochMismatch(
                f"lease {lease_id} is for epoch {lease.stream.history_epoch}, not {history_epoch}"
            )
        leases.require_current_epoch(lease.stream, current_epoch)
        leases.require_usable(lease)
        return _page(conn, lease.stream, after, limit)
