"""A Unit of Work's attempt without the stream's cursor lock: its reads and its one
joined write (``UnitOfWork.unlocked_first``).

Reads run as statements of their own, outside any transaction. The first read after
a stream is opened also reads that stream's cursor, in the same statement and
snapshot (``stream_writer.with_cursor``): the position the write will move the
cursor from. Every write waits for the commit, which sends them all as one statement
(``db.joined_write``) that moves each cursor only from the position read, so a
writer that committed in between makes it fail and nothing is written. Statements
the write depends on beyond the cursor (a review case's revision, the cited
captures held) go with it, counted (``expected``).

Anything this cannot do raises ``LockNeeded``, and the unit does its work again under
the lock: a read that takes a lock or reads what the unit has written, a stream's
first write, a statement that cannot be joined, a write refused by a check or a
constraint (the locked attempt then meets the same refusal and names it).

Where writers of one stream keep meeting each other, reading without the lock is
wasted work: each refused write is done again under the lock. So a stream whose
unlocked write was refused is written under the lock, by this process, for the next
``CONTENDED_SECONDS`` (``contended``): its writers queue on the cursor row instead.

A stream this process wrote last needs no cursor read at all: the position its own
COMMIT left (``known_cursors``) is what the write moves the cursor from, and the
write fails, writing nothing, should another writer have moved it since. Such a unit
may also presume rows absent without reading them (``Unlocked.presumes_absent``)
where the write would be refused if one existed (a plain INSERT its primary key
refuses): a new item of a rule's decision is then one statement, not two. A
presumption proved wrong (the write refused) is done again under the lock, with the
outcome the lock gives, and the stream's presumptions stop for ``CONTENDED_SECONDS``
(``doubted``): a process that keeps meeting another writer of the stream, or items
that exist, reads again instead of paying a refused write each time. Both are memory
only: a crash takes them with it, and the restarted process reads as one that never
wrote the stream; a guess is never written anywhere, only checked by the write.

A crash before the write leaves nothing: nothing was written and no lock is held.
The write is one statement in its own transaction, so a crash during it leaves all
of it or none of it; a connection lost meanwhile is raised to the caller as a lost
COMMIT is under the lock, the outcome unknown
(``tests/integration/producers/resolver/test_unlocked_decisions.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import psycopg

from db.exceptions import StreamFenced
from db.joined_write import CHANGED, JoinedWrite, LockNeeded, joinable, refuse_unlocked_read
from db.stream_writer import StreamWriter, cursor_of, read_cursor, with_cursor
from schemas.events import Envelope
from schemas.ids import StreamId

Params = Sequence[Any] | Mapping[str, Any] | None
Statement = tuple[str, Params]


CONTENDED_SECONDS = 5.0


class Contended:
    """The streams whose unlocked write was refused lately, in this process."""

    def __init__(
        self, seconds: float = CONTENDED_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._seconds = seconds
        self._clock = clock
        self._until: dict[tuple[str, str], float] = {}

    def mark(self, keys: Iterable[tuple[str, str]]) -> None:
        until = self._clock() + self._seconds
        for key in keys:
            self._until[key] = until

    def clear(self) -> None:
        self._until.clear()

    def __contains__(self, key: tuple[str, str]) -> bool:
        until = self._until.get(key)
        if until is None:
            return False
        if until < self._clock():
            self._until.pop(key, None)
            return False
        return True


contended = Contended()
doubted = Contended()
"""The streams whose known cursor or presumed absence proved wrong lately: their
units read again, as if this process knew nothing of them."""

KNOWN_STREAMS = 4096


class KnownCursors:
    """Where this process's own commits left each stream's cursor, the least recently
    written forgotten beyond ``size`` streams. Only ever a guess about the database:
    a write relying on it moves the cursor only from that position."""

    def __init__(self, size: int = KNOWN_STREAMS) -> None:
        self._size = size
        self._at: dict[StreamId, int] = {}
        self._lock = threading.Lock()

    def record(self, stream: StreamId, position: int) -> None:
        with self._lock:
            self._at.pop(stream, None)
            self._at[stream] = position
            if len(self._at) > self._size:
                del self._at[next(iter(self._at))]

    def get(self, stream: StreamId) -> int | None:
        return self._at.get(stream)

    def forget(self, streams: Iterable[StreamId]) -> None:
        with self._lock:
            for stream in streams:
                self._at.pop(stream, None)

    def clear(self) -> None:
        with self._lock:
            self._at.clear()


known_cursors = KnownCursors()


class Rows(Protocol):
    """What a read returns: a psycopg cursor, or the rows of a read that carried a
    stream's cursor with it."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class ReadRows:
    """A read's rows, already fetched."""

    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows
        self._next = 0

    @property
    def rowcount(self) -> int:
        return len(self._rows)

    def fetchone(self) -> Any:
        if self._next >= len(self._rows):
            return None
        self._next += 1
        return self._rows[self._next - 1]

    def fetchall(self) -> list[Any]:
        rest, self._next = self._rows[self._next :], len(self._rows)
        return rest

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


class Unlocked:
    """One unlocked attempt: the streams whose cursor is still to be read, the
    statements the write depends on, and how the write is made."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self._conn = conn
        self._unread: StreamWriter | None = None
        self._known: int | None = None  # the unread stream's, from ``known_cursors``
        self._presumable: set[tuple[str, str]] = set()
        self._opened = False
        self.presumed = False
        """Whether the write relies on a known cursor or a presumed absence."""
        self.sent = False
        """Whether the write was sent (its outcome may be unknown from then on)."""
        self.expected: list[tuple[str, Params, int, str]] = []

    def opened(self, writer: StreamWriter) -> None:
        """A stream was opened: its cursor goes with the next read (a stream opened
        before it has its cursor settled now), or, known, needs none."""
        self.settle()
        s = writer.stream
        key = (s.tenant_id, s.catalog_id)
        self._unread = writer
        self._known = None if key in doubted else known_cursors.get(s)
        if self._known is not None:
            self._presumable.add(key)
        self._opened = True

    def presumes_absent(self, tenant_id: str, catalog_id: str) -> bool:
        """Whether a read of this stream's rows may be answered "none" without a
        statement: its cursor is known, so nothing else needs the read sent. The
        caller must then write every row it presumes absent with a statement that
        refuses a row already there (a plain INSERT under the primary key)."""
        if (tenant_id, catalog_id) not in self._presumable:
            return False
        self.presumed = True
        return True

    def settle(self) -> None:
        """Settle the cursor still unread: the known one, else read alone."""
        writer, self._unread = self._unread, None
        if writer is None:
            return
        if self._known is not None:
            writer.read_at(self._known)
            self.presumed = True
            return
        with _fenced_needs_lock():
            position = read_cursor(self._conn, writer.stream)
        if position is None:
            raise LockNeeded(f"{writer.stream} has no cursor row yet")
        writer.read_at(position)

    def read(self, query: str, params: Params, deferred: Sequence[Statement]) -> Rows:
        """Run a read of the unit, with the cursor still unread if there is one."""
        refuse_unlocked_read(query, [*deferred, *((q, p) for q, p, _, _ in self.expected)])
        if not self._opened:
            # What was read before any stream's cursor is not guarded by one.
            raise LockNeeded("a read before the stream was opened")
        writer = self._unread
        carried = None if writer is None else with_cursor(query, params, writer.stream)
        if writer is None or carried is None:
            self.settle()
            return self._conn.execute(query, params)
        self._unread, self._known = None, None
        with _fenced_needs_lock():
            position, rows = cursor_of(writer.stream, self._conn.execute(*carried).fetchall())
        if position is None:
            raise LockNeeded(f"{writer.stream} has no cursor row yet")
        writer.read_at(position)
        return ReadRows(rows)

    def commit(
        self, writers: Sequence[StreamWriter], deferred: Sequence[Statement]
    ) -> list[Envelope]:
        """Write everything as one statement (its own transaction): each cursor's
        compare-and-set first, then the deferred writes, the expected statements and
        the outbox rows. Raises ``LockNeeded`` when the server refused it (nothing
        was written). An error without the server's verdict (a lost connection) is
        raised as it is: the statement may or may not have committed, as a COMMIT
        whose answer was lost."""
        self.settle()
        write = JoinedWrite()
        for writer in writers:
            writer.join_cursor(write)
        for query, params in deferred:
            if not joinable(query):
                raise LockNeeded(f"not joinable: {query[:60]!r}")
            write.part(query, params)
        for query, params, rows, what in self.expected:
            write.expect(write.part(query, params), rows, what)
        envelopes: list[Envelope] = []
        for writer in writers:
            envelopes.extend(writer.join_rows(write))
        self.sent = True
        try:
            self._conn.execute(*write.statement())
        except psycopg.errors.DatabaseError as exc:
            if not refused(exc):
                raise
            keys = [(w.stream.tenant_id, w.stream.catalog_id) for w in writers]
            if self.presumed:  # what it relied on was a guess: read next time
                doubted.mark(keys)
                known_cursors.forget(w.stream for w in writers)
            else:
                contended.mark(keys)
            raise LockNeeded(f"the joined write was refused ({exc.sqlstate})") from exc
        return envelopes


@contextmanager
def _fenced_needs_lock() -> Iterator[None]:
    """A stream found fenced: the locked attempt moves the write to the current
    epoch's stream (``UnitOfWork.stream``)."""
    try:
        yield
    except StreamFenced as fenced:
        raise LockNeeded(str(fenced)) from fenced


def refused(exc: psycopg.errors.DatabaseError) -> bool:
    """Whether the server refused the statement (a check, a constraint, a conflict),
    so that it certainly wrote nothing; not a lost connection, a shutdown or a
    cancel, whose outcome the caller must see."""
    state = exc.sqlstate or ""
    return state == CHANGED or state[:2] in ("22", "23", "40", "P0")
