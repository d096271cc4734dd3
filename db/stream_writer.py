"""The stream writer: cursor lock, contiguous positions and outbox rows.

A stream is ``(tenant_id, catalog_id, history_epoch)``. Its committed cursor is the
``position`` column of its ``stream_cursor`` row, never a SEQUENCE, ``max(position)``
or a timestamp: a sequence hands out numbers to transactions that later roll back
and leaves holes, and ``max()`` lets two concurrent writers pick the same number.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from db.exceptions import StreamFenced
from schemas.codec import EventCodec
from schemas.events import AggregateRef, Envelope, Payload, StreamKey
from schemas.ids import StreamId
from schemas.tracing import current_traceparent

NOTIFY_CHANNEL = "gapless_outbox"


@dataclass(frozen=True, slots=True)
class PendingEvent:
    """An accepted change waiting for its position; the writer fills in the rest."""

    aggregate: AggregateRef
    payload: Payload
    dependencies: tuple[AggregateRef, ...] = ()
    event_id: uuid.UUID = field(default_factory=uuid.uuid4)
    occurred_at: datetime = field(default_factory=lambda: datetime.now(UTC))


def lock_cursor(conn: psycopg.Connection, stream: StreamId) -> int:
    """Lock the stream's cursor row and return the committed cursor.

    The row lock serializes every writer of this stream from here until its COMMIT
    or ROLLBACK. Because a writer holds it while it allocates positions and until it
    commits, position order equals commit order: a reader that sees position p
    committed has already seen every position below p. A writer that rolls back
    releases the lock without having moved the cursor, so no position is lost. The
    price is that a slow transaction delays later writers of the same stream (never
    writers of other streams); the benchmark reports that contention.

    Take this lock before touching exported state, so that the facts a transaction
    reads are not changed under it by a writer that commits first with a later
    position.

    A fenced stream (``db.resolver.fencing``) raises ``StreamFenced``: the fence sets its mark
    under this same row lock, so a writer either committed before the fence took
    effect or finds the mark and writes nothing.
    """
    return locked_cursor(conn, stream, request_cursor_lock(conn, stream))


_LOCK_CURSOR = (
    "SELECT position, fenced_for_epoch FROM stream_cursor"
    " WHERE tenant_id = %s AND catalog_id = %s AND history_epoch = %s FOR UPDATE"
)


def _key(stream: StreamId) -> tuple[str, str, int]:
    return (stream.tenant_id, stream.catalog_id, stream.history_epoch)


def request_cursor_lock(conn: psycopg.Connection, stream: StreamId) -> psycopg.Cursor[Any]:
    """The first half of ``lock_cursor``: the locking read, only sent when ``conn``
    is in a pipeline (so it travels with what is queued before it, in one round
    trip); hand its cursor to ``locked_cursor`` once the pipeline has synced."""
    return conn.execute(_LOCK_CURSOR, _key(stream))


def locked_cursor(
    conn: psycopg.Connection, stream: StreamId, requested: psycopg.Cursor[Any]
) -> int:
    """The second half of ``lock_cursor``: the committed cursor from the locking read
    ``requested``, creating the stream's row on its first use."""
    row = requested.fetchone()
    if row is None:
        # First use of the stream. Concurrent first writers both insert; one wins and
        # the other's ON CONFLICT DO NOTHING waits for it, then both lock the row.
        conn.execute(
            "INSERT INTO stream_cursor (tenant_id, catalog_id, history_epoch)"
            " VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            _key(stream),
        )
        row = conn.execute(_LOCK_CURSOR, _key(stream)).fetchone()
        assert row is not None
    if row[1] is not None:
        raise StreamFenced(
            f"{stream} was fenced for epoch {row[1]}: it takes no more writes", int(row[1])
        )
    return int(row[0])


class StreamWriter:
    """Collects the events of one locked stream and writes them at commit."""

    def __init__(
        self,
        conn: psycopg.Connection,
        stream: StreamId,
        cursor: int,
        codec: EventCodec,
        notify: bool = True,
    ) -> None:
        """``notify``: wake the relay from inside the transaction (``pg_notify`` at
        COMMIT); False when the Unit of Work announces the commit afterwards
        (``db.resolver.commit_notifier``)."""
        self.stream = stream
        self._notify = notify
        self._conn = conn
        self._cursor = cursor
        self._codec = codec
        self._pending: list[PendingEvent] = []
        self._traces: list[str | None] = []  # the span current at each append
        self._key = codec.encode_key(
            StreamKey(tenant_id=stream.tenant_id, catalog_id=stream.catalog_id)
        )

    @property
    def cursor(self) -> int:
        """The committed cursor read under the lock (positions not yet allocated)."""
        return self._cursor

    def append(self, event: PendingEvent) -> None:
        self._pending.append(event)
        self._traces.append(current_traceparent())

    @property
    def pending(self) -> tuple[PendingEvent, ...]:
        """The events appended and not yet flushed, in append order (their positions
        will follow this order)."""
        return tuple(self._pending)

    def _envelopes(self) -> list[Envelope]:
        """The pending events as envelopes at positions ``cursor+1 …``, in order."""
        s = self.stream
        return [
            Envelope(
                tenant_id=s.tenant_id,
                catalog_id=s.catalog_id,
                history_epoch=s.history_epoch,
                position=self._cursor + offset,
                event_id=event.event_id,
                aggregate=event.aggregate,
                dependencies=event.dependencies,
                occurred_at=event.occurred_at,
                payload=event.payload,
            )
            for offset, event in enumerate(self._pending, start=1)
        ]

    def flush(self) -> list[Envelope]:
        """Allocate positions, write the outbox rows and move the cursor.

        Steps, all inside the caller's transaction (nothing is visible until COMMIT):
        1. number the pending events ``cursor+1 … cursor+n`` in append order;
        2. encode each key and value once; the relay ships these exact bytes (the
           headers it builds from the row's event_id, history_epoch and trace_context);
        3. insert the outbox rows, each with the ``traceparent`` of the span that was
           current when its event was appended (or NULL);
        4. move the cursor to ``cursor+n``;
        5. NOTIFY the relay (delivered only if the transaction commits), unless the
           Unit of Work announces the commit after it (``db.resolver.commit_notifier``).
        In a pipeline the statement is only sent: its error (a short write among
        them) is raised when the pipeline syncs, at the latest by the COMMIT, which
        then rolls back. A crash anywhere before COMMIT leaves nothing: the cursor,
        outbox rows and facts roll back together and the next writer reuses the same
        positions.
        """
        if not self._pending:
            return []
        s = self.stream
        envelopes = self._envelopes()  # steps 1 and 2
        rows = [(e.event_id, e.event_type, self._codec.encode_value(e)) for e in envelopes]
        new_cursor = self._cursor + len(self._pending)
        # Steps 3-5 as one statement: one round trip whatever the batch size, and none
        # of its own when the Unit of Work sends it in a pipeline with the COMMIT. The
        # arrays go in binary, in append order, so row k takes position base + k. The
        # server checks the counts (``outbox_written`` raises unless every row and the
        # cursor were written), so a short write fails the statement and the COMMIT
        # after it rolls back; nothing is read back here.
        self._conn.execute(
            "WITH new_rows AS ("
            " INSERT INTO outbox (tenant_id, catalog_id, history_epoch, position,"
            " event_id, event_type, key, value, trace_context)"
            " SELECT %(t)s, %(c)s, %(e)s, %(base)s + r.ord, r.event_id, r.event_type, %(key)b,"
            " r.value, r.trace"
            " FROM unnest(%(ids)b::uuid[], %(types)b::text[], %(values)b::bytea[],"
            " %(traces)s::text[]) WITH ORDINALITY AS r(event_id, event_type, value, trace, ord)"
            " RETURNING 1),"
            " moved AS ("
            " UPDATE stream_cursor SET position = %(cursor)s, updated_at = now()"
            " WHERE tenant_id = %(t)s AND catalog_id = %(c)s AND history_epoch = %(e)s"
            " RETURNING 1)"
            " SELECT outbox_written((SELECT count(*) FROM new_rows), %(n)s,"
            " (SELECT count(*) FROM moved))"
            + (", pg_notify(%(channel)s, %(stream)s)" if self._notify else ""),
            {
                "t": s.tenant_id,
                "c": s.catalog_id,
                "e": s.history_epoch,
                "key": self._key,
                "base": self._cursor,
                "ids": [r[0] for r in rows],
                "types": [r[1] for r in rows],
                "values": [r[2] for r in rows],
                "traces": self._traces,
                "n": len(rows),
                "cursor": new_cursor,
                "channel": NOTIFY_CHANNEL,
                "stream": str(s),
            },
        )
        self._cursor = new_cursor
        self._pending.clear()
        self._traces = []
        return envelopes
