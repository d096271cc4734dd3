"""Outbox reads and the published-through position, for the relay.

The writes happen in ``stream_writer``. What is published is one number per stream,
``stream_publication.published_position``: every outbox position up to it has been
confirmed by Kafka, and the stream's unpublished rows are the ones above it. Because
positions are gapless and committed in order, those rows are contiguous, so the
relay reads them with a primary-key range scan and records a batch with one
single-row UPDATE instead of touching every row it shipped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import psycopg

from schemas.codec import KafkaHeaders, kafka_headers
from schemas.ids import StreamId

ROW_COLUMNS = (
    "position, event_id::text, history_epoch, key, value,"
    " extract(epoch FROM committed_at)::float8, trace_context"
)
"""What a read of outbox rows selects: an ``OutboxRow``'s fields, in order."""


class OutboxRow(NamedTuple):
    """One message as stored: the key and value bytes the relay ships, and the event
    id (canonical UUID text) and epoch its headers are built from when it is sent.

    A plain tuple holding no other containers: the relay keeps a whole batch of them
    alive, and every container object in it is more work for the garbage collector.
    """

    position: int
    event_id: str
    history_epoch: int
    key: bytes
    value: bytes
    committed_at: float = 0.0
    """When the writer committed it, in seconds since the epoch (for latency)."""
    trace_context: str | None = None
    """The writing operation's W3C ``traceparent``, when tracing was on."""

    @property
    def headers(self) -> KafkaHeaders:
        return kafka_headers(self.event_id, self.history_epoch, self.trace_context)


def streams_with_unpublished(conn: psycopg.Connection, limit: int) -> list[StreamId]:
    """Streams whose cursor is ahead of their published position (fenced ones
    excepted: their unpublished rows stay unpublished).

    One row per stream on each side, and plain reads: a writer holding a cursor row
    FOR UPDATE does not block this, and this does not block it.
    """
    rows = conn.execute(
        "SELECT c.tenant_id, c.catalog_id, c.history_epoch FROM stream_cursor c"
        " LEFT JOIN stream_publication p ON p.tenant_id = c.tenant_id"
        " AND p.catalog_id = c.catalog_id AND p.history_epoch = c.history_epoch"
        " WHERE c.position > coalesce(p.published_position, 0) AND c.fenced_at IS NULL"
        " LIMIT %s",
        (limit,),
    ).fetchall()
    return [StreamId(t, c, e) for t, c, e in rows]


def try_claim_stream(conn: psycopg.Connection, stream: StreamId) -> bool:
    """Claim a whole stream for this relay until the current transaction ends.

    A transaction-scoped advisory lock keyed by the stream: a second relay's try
    fails and it moves on to another stream, so two relays never interleave the
    messages of one stream, and only the claim holder moves its published position.
    Writers do not take this lock, so publishing never blocks them; the lock is
    released by COMMIT or ROLLBACK, and by the server if the relay's connection dies.
    """
    row = conn.execute(
        "SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))", (claim_key(stream),)
    ).fetchone()
    return bool(row and row[0])


def claim_key(stream: StreamId) -> str:
    """The advisory-lock name of a stream's relay claim (the fence takes it too)."""
    return f"relay:{stream}"


def published_position(conn: psycopg.Connection, stream: StreamId) -> int:
    """The stream's published-through position (0 if it never published)."""
    row = conn.execute(
        "SELECT published_position FROM stream_publication"
        " WHERE tenant_id = %s AND catalog_id = %s AND history_epoch = %s",
        (stream.tenant_id, stream.catalog_id, stream.history_epoch),
    ).fetchone()
    return int(row[0]) if row else 0


def read_after(
    conn: psycopg.Connection, stream: StreamId, after: int, limit: int
) -> list[OutboxRow]:
    """Up to ``limit`` rows of ``stream`` above position ``after``, in position order."""
    rows = conn.execute(
        f"SELECT {ROW_COLUMNS} FROM outbox"
        " WHERE tenant_id = %s AND catalog_id = %s AND history_epoch = %s"
        " AND position > %s ORDER BY position LIMIT %s",
        (stream.tenant_id, stream.catalog_id, stream.history_epoch, after, limit),
        binary=True,
    ).fetchall()
    return [OutboxRow._make(row) for row in rows]


def mark_published(conn: psycopg.Connection, stream: StreamId, through: int) -> int:
    """Record that every position of ``stream`` up to ``through`` is in Kafka.

    Monotonic: the position never moves backwards, whatever ``through`` is. Returns
    the position now recorded. One single-row statement, and no index covers the
    position, so PostgreSQL can update the row in place (HOT).
    """
    row = conn.execute(
        "INSERT INTO stream_publication"
        " (tenant_id, catalog_id, history_epoch, published_position)"
        " VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (tenant_id, catalog_id, history_epoch) DO UPDATE"
        " SET published_position = greatest("
        "  stream_publication.published_position, excluded.published_position),"
        "  updated_at = now()"
        " RETURNING published_position",
        (stream.tenant_id, stream.catalog_id, stream.history_epoch, through),
    ).fetchone()
    assert row is not None
    return int(row[0])


# --- a pass over several streams in a few statements ---------------------------------


class ClaimedStream(NamedTuple):
    """A stream this relay claimed, with what it read after the claim."""

    stream: StreamId
    published: int
    """Its published-through position."""
    cursor: int
    """Its committed cursor: every position up to it is in the outbox."""
    fenced: bool


def claim_streams(conn: psycopg.Connection, streams: Sequence[StreamId]) -> list[ClaimedStream]:
    """Claim each of ``streams`` (``try_claim_stream``) and read the claimed ones'
    positions, in ``streams``' order. On a connection in pipeline mode (the relay's)
    both statements travel in one round trip with whatever is queued before them (the
    transaction's BEGIN); this opens no pipeline of its own, since entering a nested
    one makes psycopg sync what is queued first.

    The positions are read by a second statement, so its snapshot is taken after every
    claim was granted: a fence takes the same claim, so a stream it fenced before the
    claim reads as fenced here (the same order as ``try_claim_stream`` then
    ``fencing.is_fenced``).
    """
    if not streams:
        return []
    keys = [claim_key(s) for s in streams]
    granted = conn.execute(
        "SELECT k.ord FROM unnest(%b::text[]) WITH ORDINALITY AS k(key, ord)"
        " WHERE pg_try_advisory_xact_lock(hashtextextended(k.key, 0))",
        (keys,),
    )
    positions = conn.execute(
        "SELECT s.ord, c.position, c.fenced_at IS NOT NULL,"
        " coalesce(p.published_position, 0)"
        " FROM unnest(%b::text[], %b::text[], %b::bigint[]) WITH ORDINALITY"
        " AS s(tenant_id, catalog_id, history_epoch, ord)"
        " JOIN stream_cursor c USING (tenant_id, catalog_id, history_epoch)"
        " LEFT JOIN stream_publication p USING (tenant_id, catalog_id, history_epoch)",
        (
            [s.tenant_id for s in streams],
            [s.catalog_id for s in streams],
            [s.history_epoch for s in streams],
        ),
    )
    claimed = {int(r[0]) for r in granted.fetchall()}
    found = {int(r[0]): r for r in positions.fetchall()}
    out = []
    for ord_, stream in enumerate(streams, start=1):
        if ord_ in claimed and ord_ in found:
            _, cursor, fenced, published = found[ord_]
            out.append(ClaimedStream(stream, int(published), int(cursor), bool(fenced)))
    return out


StoredRow = tuple[int, str, int, bytes, bytes, float, str | None]
"""An outbox row as the relay reads it: ``OutboxRow``'s fields in its order
(position, event_id, history_epoch, key, value, committed_at, trace_context), as the
plain tuple the driver
returns. An ``OutboxRow`` is one too; the relay's hot path reads these by index
rather than build an ``OutboxRow`` per row."""


def request_ranges(
    conn: psycopg.Connection, ranges: Sequence[tuple[StreamId, int, int]]
) -> Callable[[], list[list[StoredRow]]]:
    """The rows of each ``(stream, after, through)``: positions after+1 … through in
    position order (a primary-key range scan each), one list per range.

    In two steps: the statements are sent now, their rows taken when the returned
    function is called. On a connection in pipeline mode, requests sent one after
    another run on the server while the caller works on the rows of the first."""
    cursors = [
        conn.execute(
            f"SELECT {ROW_COLUMNS} FROM outbox"
            " WHERE tenant_id = %s AND catalog_id = %s AND history_epoch = %s"
            " AND position > %s AND position <= %s ORDER BY position",
            (stream.tenant_id, stream.catalog_id, stream.history_epoch, after, through),
            binary=True,
        )
        for stream, after, through in ranges
    ]

    def rows() -> list[list[StoredRow]]:
        return [cursor.fetchall() for cursor in cursors]

    return rows


def mark_published_all(conn: psycopg.Connection, marks: Sequence[tuple[StreamId, int]]) -> None:
    """``mark_published`` for several streams in one statement (never backwards)."""
    if not marks:
        return
    conn.execute(
        "INSERT INTO stream_publication"
        " (tenant_id, catalog_id, history_epoch, published_position)"
        " SELECT * FROM unnest(%b::text[], %b::text[], %b::bigint[], %b::bigint[])"
        " ON CONFLICT (tenant_id, catalog_id, history_epoch) DO UPDATE"
        " SET published_position = greatest("
        "  stream_publication.published_position, excluded.published_position),"
        "  updated_at = now()",
        (
            [s.tenant_id for s, _ in marks],
            [s.catalog_id for s, _ in marks],
            [s.history_epoch for s, _ in marks],
            [through for _, through in marks],
        ),
    )
