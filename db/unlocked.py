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

A crash before the write leaves nothing: nothing was written and no lock is held.
The write is one statement in its own transaction, so a crash during it leaves all
of it or none of it; a connection lost meanwhile is raised to the caller as a lost
COMMIT is under the lock, the outcome unknown
(``tests/integration/producers/resolver/test_unlocked_decisions.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import psycopg

from db.exceptions import StreamFenced
from db.joined_write import CHANGED, JoinedWrite, LockNeeded, joinable, refuse_unlocked_read
from db.stream_writer import StreamWriter, cursor_of, read_cursor, with_cursor
from schemas.events import Envelope

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
        self._opened = False
        self.expected: list[tuple[str, Params, int, str]] = []

    def opened(self, writer: StreamWriter) -> None:
        """A stream was opened: its cursor goes with the next read (a stream opened
        before it has its cursor read now)."""
        self.settle()
        self._unread = writer
        self._opened = True

    def settle(self) -> None:
        """Read the cursor still unread, alone."""
        writer, self._unread = self._unread, None
        if writer is not None:
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
        self._unread = None
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
        try:
            self._conn.execute(*write.statement())
        except psycopg.errors.DatabaseError as exc:
            if not refused(exc):
                raise
            contended.mark((w.stream.tenant_id, w.stream.catalog_id) for w in writers)
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
