"""Reading retained outbox rows for the retained-events API.

A page must be read in one snapshot together with the stream's pruned-through
position: read separately, a pruner committing in between could delete rows the
page was about to include, and the page would silently skip positions.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import psycopg

from schemas.ids import StreamId


@dataclass(frozen=True, slots=True)
class EventRow:
    position: int
    event_id: uuid.UUID
    event_type: str
    key: bytes
    value: bytes


def begin_snapshot(conn: psycopg.Connection) -> None:
    """Make the transaction just begun one REPEATABLE READ READ ONLY snapshot; must be
    its first statement."""
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")


def read_events(
    conn: psycopg.Connection, stream: StreamId, after: int, limit: int
) -> list[EventRow]:
    """Up to ``limit`` rows above position ``after``, in position order (the encoded
    key and value exactly as the writer stored them)."""
    rows = conn.execute(
        "SELECT position, event_id, event_type, key, value FROM outbox"
        " WHERE tenant_id = %s AND catalog_id = %s AND history_epoch = %s AND position > %s"
        " ORDER BY position LIMIT %s",
        (stream.tenant_id, stream.catalog_id, stream.history_epoch, after, limit),
    ).fetchall()
    return [EventRow(int(p), e, str(t), bytes(k), bytes(v)) for p, e, t, k, v in rows]
