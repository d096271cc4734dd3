"""Outbox reads and marks for the relay (the writes happen in ``stream_writer``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from db.stream_writer import StreamId


@dataclass(frozen=True, slots=True)
class OutboxRow:
    position: int
    event_id: Any
    key: bytes
    value: bytes
    headers: dict[str, str]


def streams_with_unpublished(conn: psycopg.Connection, limit: int) -> list[StreamId]:
    """Streams that have at least one unpublished row (served by a partial index)."""
    rows = conn.execute(
        "SELECT DISTINCT tenant_id, catalog_id, history_epoch FROM outbox"
        " WHERE published_at IS NULL LIMIT %s",
        (limit,),
    ).fetchall()
    return [StreamId(t, c, e) for t, c, e in rows]


def try_claim_stream(conn: psycopg.Connection, stream: StreamId) -> bool:
    """Claim a whole stream for this relay until the current transaction ends.

    A transaction-scoped advisory lock keyed by the stream: a second relay's try
    fails and it moves on to another stream, so two relays never interleave the
    messages of one stream. Writers do not take this lock, so publishing never
    blocks them; the lock is released by COMMIT or ROLLBACK, and by the server if
    the relay's connection dies.
    """
    row = conn.execute(
        "SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))",
        (f"relay:{stream}",),
    ).fetchone()
    return bool(row and row[0])


def read_unpublished(conn: psycopg.Connection, stream: StreamId, limit: int) -> list[OutboxRow]:
    rows = conn.execute(
        "SELECT position, event_id, key, value, headers FROM outbox"
        " WHERE tenant_id = %s AND catalog_id = %s AND history_epoch = %s"
        " AND published_at IS NULL ORDER BY position LIMIT %s",
        (stream.tenant_id, stream.catalog_id, stream.history_epoch, limit),
    ).fetchall()
    return [OutboxRow(p, e, bytes(k), bytes(v), h) for p, e, k, v, h in rows]


def mark_published(conn: psycopg.Connection, stream: StreamId, first: int, last: int) -> int:
    cur = conn.execute(
        "UPDATE outbox SET published_at = now()"
        " WHERE tenant_id = %s AND catalog_id = %s AND history_epoch = %s"
        " AND position BETWEEN %s AND %s AND published_at IS NULL",
        (stream.tenant_id, stream.catalog_id, stream.history_epoch, first, last),
    )
    return cur.rowcount
