"""The stream writer: cursor lock, contiguous positions and outbox rows.

A stream is ``(tenant_id, catalog_id, history_epoch)``. Its committed cursor is the
``position`` column of its ``stream_cursor`` row, never a SEQUENCE, ``max(position)``
or a timestamp: a sequence hands out numbers to transactions that later roll back
and leaves holes, and ``max()`` lets two concurrent writers pick the same number.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from db.exceptions import StreamFenced
from db.joined_write import JoinedWrite
from db.row_source import Column, rows_from
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


_READ_CURSOR = (
    "SELECT position, fenced_for_epoch FROM stream_cursor"
    " WHERE tenant_id = %s AND catalog_id = %s AND history_epoch = %s"
)
_LOCK_CURSOR = f"{_READ_CURSOR} FOR UPDATE"
_ORDERED = re.compile(r"\bORDER\s+BY\b", re.I)


_INSERT_ROWS = (
    "INSERT INTO outbox (tenant_id, catalog_id, history_epoch, position, event_id, event_type,"
    " key, value, trace_context)"
    " SELECT %(t)s, %(c)s, %(e)s, %(base)s + r.ord, r.event_id, r.event_type, %(key)b,"
    " r.value, r.trace FROM "
)
_OUTBOX_COLUMNS = (
    Column("ids", "event_id", "uuid"),
    Column("types", "event_type", "text"),
    Column("values", "value", "bytea"),
    Column("traces", "trace", "text", binary=False),
)


def _key(stream: StreamId) -> tuple[str, str, int]:
    return (stream.tenant_id, stream.catalog_id, stream.history_epoch)


def read_cursor(conn: psycopg.Connection, stream: StreamId) -> int | None:
    """The stream's committed cursor read without its lock (None: the stream has no
    cursor row yet). A write that relies on it moves the cursor only from this
    position (``StreamWriter.join_cursor``), so a writer that committed since makes
    that write fail instead of being overwritten. A fenced stream raises
    ``StreamFenced``, as ``lock_cursor`` does."""
    row = conn.execute(_READ_CURSOR, _key(stream)).fetchone()
    return None if row is None else _unfenced(stream, row)


def with_cursor(
    query: str, params: Sequence[Any] | Mapping[str, Any] | None, stream: StreamId
) -> tuple[str, Sequence[Any] | Mapping[str, Any]] | None:
    """``query`` (a plain read) as one statement that also reads ``stream``'s cursor
    without its lock, in the same snapshot: each row is ``(position,
    fenced_for_epoch, present, *the read's columns)``, one row with ``present`` NULL
    when the read found nothing, none when the stream has no cursor row. None for a
    read whose rows come in an order of its own (``ORDER BY``), which a join could
    lose: that one goes alone, after ``read_cursor``."""
    if _ordered(query):
        return None
    wrapped = (
        "SELECT c.position, c.fenced_for_epoch, r.* FROM stream_cursor c"
        f" LEFT JOIN LATERAL (SELECT true AS present_, q.* FROM ({query}) q) r ON true"
    )
    if isinstance(params, Mapping):
        where = (
            " WHERE c.tenant_id = %(cursor_t)s AND c.catalog_id = %(cursor_c)s"
            " AND c.history_epoch = %(cursor_e)s"
        )
        t, c, e = _key(stream)
        return wrapped + where, {**params, "cursor_t": t, "cursor_c": c, "cursor_e": e}
    where = " WHERE c.tenant_id = %s AND c.catalog_id = %s AND c.history_epoch = %s"
    return wrapped + where, [*(params or ()), *_key(stream)]


@functools.lru_cache(maxsize=1024)
def _ordered(query: str) -> bool:
    return _ORDERED.search(query) is not None


@functools.lru_cache(maxsize=4096)
def _encoded_key(codec: EventCodec, tenant_id: str, catalog_id: str) -> bytes:
    """A stream's Kafka key, encoded once per codec (every event of it carries it)."""
    return codec.encode_key(StreamKey(tenant_id=tenant_id, catalog_id=catalog_id))


def cursor_of(stream: StreamId, rows: Sequence[Sequence[Any]]) -> tuple[int | None, list[Any]]:
    """What a ``with_cursor`` read returned: the cursor (None: no cursor row) and the
    read's own rows. A fenced stream raises ``StreamFenced``."""
    if not rows:
        return None, []
    return _unfenced(stream, tuple(rows[0][:2])), [r[3:] for r in rows if r[2] is not None]


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
    return _unfenced(stream, row)


def _unfenced(stream: StreamId, row: tuple[Any, ...]) -> int:
    """The position of a cursor row ``(position, fenced_for_epoch)``, unless fenced."""
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
        self._key = _encoded_key(codec, stream.tenant_id, stream.catalog_id)

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
        envelopes, rows, params = self._outbox_rows()  # steps 1 and 2
        # Steps 3-5 as one statement: one round trip whatever the batch size, and none
        # of its own when the Unit of Work sends it in a pipeline with the COMMIT. The
        # arrays go in binary, in append order, so row k takes position base + k. The
        # server checks the counts (``outbox_written`` raises unless every row and the
        # cursor were written), so a short write fails the statement and the COMMIT
        # after it rolls back; nothing is read back here.
        self._conn.execute(
            f"WITH new_rows AS ({_INSERT_ROWS}{rows} RETURNING 1),"
            " moved AS ("
            " UPDATE stream_cursor SET position = %(cursor)s, updated_at = now()"
            " WHERE tenant_id = %(t)s AND catalog_id = %(c)s AND history_epoch = %(e)s"
            " RETURNING 1)"
            " SELECT outbox_written((SELECT count(*) FROM new_rows), %(n)s,"
            " (SELECT count(*) FROM moved))"
            + (", pg_notify(%(channel)s, %(stream)s)" if self._notify else ""),
            params | {"channel": NOTIFY_CHANNEL, "stream": str(self.stream)},
        )
        self._flushed(params["cursor"])
        return envelopes

    def read_at(self, cursor: int) -> None:
        """The committed cursor, read after this writer was made (an unlocked unit
        reads it with its first read, ``with_cursor``)."""
        self._cursor = cursor

    def join_cursor(self, write: JoinedWrite) -> None:
        """The first half of ``join_rows``: the cursor's compare-and-set, as the
        joined write's next check (the Unit of Work adds every stream's first)."""
        if not self._pending:
            return
        s = self.stream
        moved = write.part(
            "UPDATE stream_cursor SET position = %(to)s, updated_at = now()"
            " WHERE tenant_id = %(t)s AND catalog_id = %(c)s AND history_epoch = %(e)s"
            " AND position = %(at)s AND fenced_for_epoch IS NULL RETURNING 1",
            {
                "t": s.tenant_id,
                "c": s.catalog_id,
                "e": s.history_epoch,
                "at": self._cursor,
                "to": self._cursor + len(self._pending),
            },
        )
        write.expect(moved, 1, f"the cursor of {s} at {self._cursor}")

    def join_rows(self, write: JoinedWrite) -> list[Envelope]:
        """``flush`` for a write joined into one statement (``db.joined_write``),
        after ``join_cursor``: the cursor moves only from the position read without
        its lock (``read_cursor``) and only while the stream is not fenced, else
        ``write_expected`` fails the statement and nothing is written. The same rows
        and the same count check as ``flush``; the relay woken as ``flush`` does."""
        if not self._pending:
            return []
        envelopes, source, params = self._outbox_rows()
        rows = write.part(f"{_INSERT_ROWS}{source} RETURNING 1", params)
        write.check(f"outbox_written((SELECT count(*) FROM {rows}), %(n)s, 1)", {"n": params["n"]})
        if self._notify:
            write.check(
                "pg_notify(%(channel)s, %(stream)s)",
                {"channel": NOTIFY_CHANNEL, "stream": str(self.stream)},
            )
        self._flushed(params["cursor"])
        return envelopes

    def _outbox_rows(self) -> tuple[list[Envelope], str, dict[str, Any]]:
        """Steps 1 and 2 of ``flush``: the envelopes, and the outbox rows as the ``FROM``
        item ``_INSERT_ROWS`` ends with (``db.row_source``) and its parameters."""
        s = self.stream
        envelopes = self._envelopes()
        rows = [(e.event_id, e.event_type, self._codec.encode_value(e)) for e in envelopes]
        source, params = rows_from(
            _OUTBOX_COLUMNS,
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
                "cursor": self._cursor + len(rows),
            },
            "r",
            ordinality=True,
        )
        return envelopes, source, params

    def _flushed(self, cursor: int) -> None:
        """The pending events written: the cursor is theirs to move at COMMIT."""
        self._cursor = cursor
        self._pending.clear()
        self._traces = []
