"""The Unit of Work: one resolver transaction around accepted facts and their events.

Repositories get a ``Transaction`` that can run statements but has no commit: only the
Unit of Work commits, after writing the outbox rows of every event it collected, so an
accepted change can never commit without its events (INV-06).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from types import TracebackType
from typing import Any, Self, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from db.control.epochs import FIRST_EPOCH, EpochSource
from db.control.pauses import PauseWatch
from db.exceptions import EpochChanged, HistoryRewound, StreamFenced
from db.joined_write import LockNeeded
from db.own_rows import OwnRows
from db.resolver.commit_notifier import CommitNotifier
from db.stream_writer import StreamWriter, locked_cursor, request_cursor_lock
from db.unlocked import Rows, Unlocked, contended, known_cursors
from schemas.codec import EventCodec
from schemas.events import Envelope
from schemas.ids import StreamId

Statement = tuple[str, "Sequence[Any] | Mapping[str, Any] | None"]
T = TypeVar("T")

BEGIN: Statement = ("BEGIN", None)
COMMIT = "COMMIT"


class Transaction:
    """Statements inside the Unit of Work's transaction; deliberately no commit.

    ``defer`` queues a statement whose result nobody reads (an insert of rows that
    are never read back in the transaction); it is sent with the next statement in
    one round trip (a pipeline), in order, and its error is raised by that next
    statement. A ``Transaction`` without a queue sends a deferred statement at once.
    ``defer_checked`` is for a statement whose only result is whether it fails.
    """

    def __init__(
        self,
        conn: psycopg.Connection,
        deferred: list[Statement] | None = None,
        own: OwnRows | None = None,
        late_errors: bool = False,
        groups: dict[tuple[Any, ...], tuple[int, dict[str, Any]]] | None = None,
        unlocked: Unlocked | None = None,
    ) -> None:
        """``own``: the rows this transaction wrote (``db.own_rows``), kept by the
        Unit of Work; without it every read goes to the database. ``late_errors``:
        the caller lets a checked statement's error be raised by a later statement
        (``defer_checked``). ``unlocked``: the unit reads without the cursor lock
        and writes everything in one statement at commit (``db.unlocked``)."""
        self._conn = conn
        self._deferred = deferred
        self.own = own if own is not None else OwnRows()
        self.late_errors = late_errors
        self._groups = groups
        self._unlocked = unlocked

    @property
    def conn(self) -> psycopg.Connection:
        return self._conn

    @property
    def attempt(self) -> Unlocked | None:
        """The unlocked attempt this transaction belongs to (None: under the lock)."""
        return self._unlocked

    @property
    def unlocked(self) -> bool:
        """Whether this unit reads without the stream's cursor lock, every write
        deferred to one statement at commit (``UnitOfWork.unlocked_first``): a read
        that needs the lock raises ``LockNeeded``; ``defer_expected`` is for a
        statement the write depends on."""
        return self._unlocked is not None

    def presumes_absent(self, tenant_id: str, catalog_id: str) -> bool:
        """Whether a read of rows of this stream may be answered "none" unasked
        (``Unlocked.presumes_absent``): only in an unlocked unit, and then every row
        so presumed absent must be written by a statement that refuses one already
        there."""
        return self._unlocked is not None and self._unlocked.presumes_absent(tenant_id, catalog_id)

    def execute(self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> Rows:
        if self._unlocked is not None:
            return self._unlocked.read(query, params, self._deferred or [])
        if not self._deferred:
            return self._conn.execute(query, params)
        with self._conn.pipeline():
            self.send_deferred()
            cursor = self._conn.execute(query, params)
        return cursor

    def defer(self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> None:
        if self._deferred is None:
            self._conn.execute(query, params)
        else:
            if self._groups:
                self._groups.clear()  # joined statements stay before this one
            self._deferred.append((query, params))

    def defer_checked(
        self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None
    ) -> None:
        """A statement whose only result is whether it fails (an insert a unique index
        may refuse): deferred when the transaction lets errors surface late, else
        sent at once (after the deferred ones), so its error is raised here, where
        the caller turns it into the domain's error. A caller letting errors surface
        late redoes the work without, to learn which statement failed and why (the
        capture worker's batch, settled one by one after a failure)."""
        if self.late_errors or self.unlocked:
            self.defer(query, params)
        else:
            self.execute(query, params)

    def defer_expected(
        self, query: str, params: Sequence[Any] | Mapping[str, Any], rows: int, what: str
    ) -> None:
        """Only in an unlocked unit: a statement that goes with the write (a locking
        read, or a compare-and-set ``UPDATE … RETURNING``), which fails unless it
        returns exactly ``rows`` rows; the unit then redoes its work under the lock,
        where the caller learns why."""
        assert self._unlocked is not None, "defer_expected outside an unlocked unit"
        self._unlocked.expected.append((query, params, rows, what))

    def defer_rows(
        self, query: str, params: dict[str, Any], columns: Sequence[str], rank: int
    ) -> None:
        """``defer`` an INSERT of rows nobody reads back, whose ``columns`` (parameters
        holding one list element per row) may join those of the same statement
        deferred earlier (the same query and other parameters): one statement for
        all of them. Such statements queued one after another (no other deferred
        statement between) are sent in ``rank`` order: a table's rank is above the
        ranks of the tables its foreign keys name, so every row goes in after the
        rows it references, wherever its statement was joined. Only when errors may
        surface late: should the caller have ranked wrong, the insert fails and the
        caller redoes the work one transaction at a time. Otherwise just ``defer``."""
        if self._groups is None or self._deferred is None or not self.late_errors:
            self.defer(query, params)
            return
        key = (query, *sorted((k, v) for k, v in params.items() if k not in columns))
        found = self._groups.get(key)
        if found is not None:
            for column in columns:
                found[1][column].extend(params[column])
            return
        group = {k: list(v) if k in columns else v for k, v in params.items()}
        ranks = {id(g): r for r, g in self._groups.values()}
        at = len(self._deferred)
        while at > 0 and ranks.get(id(self._deferred[at - 1][1]), -1) > rank:
            at -= 1  # a joined statement of a higher rank: this one goes first
        self._deferred.insert(at, (query, group))
        self._groups[key] = (rank, group)

    def send_deferred(self) -> None:
        """Send the queued statements (inside a pipeline: without waiting)."""
        if self._groups:
            self._groups.clear()  # sent: a later row starts a statement of its own
        if self._deferred:
            for query, params in self._deferred:
                self._conn.execute(query, params)
            self._deferred.clear()

    def executemany(self, query: str, params: Sequence[Sequence[Any]]) -> None:
        if self.unlocked:
            raise LockNeeded("executemany writes at once")
        with self._conn.pipeline():
            self.send_deferred()
            with self._conn.cursor() as cur:
                cur.executemany(query, params)


class UnitOfWork:
    """Use as ``with UnitOfWork(...) as uow: …; uow.commit()``.

    Leaving the block without ``commit()`` (or with an exception) rolls back, which
    releases every cursor lock and consumes no position.
    """

    def __init__(
        self,
        pool: ConnectionPool,
        epochs: EpochSource,
        codec: EventCodec,
        pauses: PauseWatch | None = None,
        notifier: CommitNotifier | None = None,
        late_errors: bool = False,
        unlocked_reads: bool = True,
    ) -> None:
        """``notifier``: announce each commit to the relay after it
        (``db.resolver.commit_notifier``); without one, each transaction notifies at COMMIT.
        ``late_errors``: see ``Transaction.defer_checked``. ``unlocked_reads``: let
        ``unlocked_first`` try work without the cursor lock first (False: always
        under the lock)."""
        self._pool = pool
        self._notifier = notifier
        self._epochs = epochs
        self._codec = codec
        self._pauses = pauses
        self._holds = ExitStack()
        self._conn: psycopg.Connection | None = None
        self._writers: dict[tuple[str, str], StreamWriter] = {}
        self._unissued: set[tuple[str, str]] = set()
        self._deferred: list[Statement] = []
        self._own = OwnRows()
        self._late_errors = late_errors
        self._unlocked_reads = unlocked_reads
        self._unlocked: Unlocked | None = None  # while an unlocked attempt runs
        self._tx: Transaction | None = None
        self._groups: dict[tuple[Any, ...], tuple[int, dict[str, Any]]] = {}
        self._committed = False
        self.envelopes: list[Envelope] = []
        self.held_captures: set[tuple[str, uuid.UUID]] = set()
        """Captures share-locked in this transaction by decisions citing them
        (``producers.resolver.decisions``): a later decision citing one again
        needs no second lock."""
        self.memo: dict[tuple[object, ...], Any] = {}
        """Reads kept for the rest of the transaction, for state nobody else can
        change while it holds its streams' cursor locks and that it does not change
        itself (an identity generation a capture is resolved in): a transaction
        doing many products' work reads them once."""

    def __enter__(self) -> Self:
        self._holds = ExitStack()
        conn = self._pool.getconn()
        # The transaction is opened and closed by statements of its own: psycopg's
        # implicit BEGIN would cost a round trip of its own in a pipeline (it syncs
        # after it), while a queued BEGIN travels with the first statement, and the
        # COMMIT with the last ones.
        try:
            conn.autocommit = True
        except BaseException:
            self._pool.putconn(conn)  # broken: the pool discards it
            raise
        self._conn = conn
        self._committed = False
        self._reset()
        return self

    def _reset(self) -> None:
        """Nothing done yet: no stream, statement, row or read kept; BEGIN queued."""
        self._writers.clear()
        self._unissued.clear()
        self._deferred[:] = [BEGIN]
        self._unlocked = None
        self._groups.clear()
        self._own.clear()
        self.envelopes = []
        self.held_captures = set()
        self.memo = {}

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        self._deferred.clear()
        self._groups.clear()
        self._unlocked = None
        try:
            if not self._committed:
                conn.rollback()  # a no-op if the BEGIN was never sent
        finally:
            try:
                conn.autocommit = False
            except psycopg.Error:
                conn.close()  # not to be handed out again: the pool discards it
            self._pool.putconn(conn)
            self._holds.close()  # the work on paused-able catalogs has ended

    @property
    def tx(self) -> Transaction:
        """The statements of this unit's transaction as it stands: one ``Transaction``
        while the connection and the attempt (locked or not) stay the same."""
        conn, unlocked, tx = self._require(), self._unlocked, self._tx
        if tx is None or tx.conn is not conn or tx.attempt is not unlocked:
            tx = self._tx = Transaction(
                conn, self._deferred, self._own, self._late_errors, self._groups, unlocked
            )
        return tx

    def unlocked_first(self, work: Callable[[], T]) -> T:
        """Run ``work`` (the whole of one change, commit included) reading without the
        stream's cursor lock; should it need the lock, redo it from the start under
        the lock. Only a fresh unit tries (nothing done in it yet) and only with
        ``unlocked_reads``; otherwise ``work`` simply runs under the lock.

        Unlocked, ``stream`` locks nothing (the stream's cursor is read with the next
        read, in the same statement, ``db.unlocked``), each read is a statement of its
        own, every write waits for the commit, and the commit sends
        them all as one statement (``db.joined_write``) that moves each cursor only
        from the position read, so a writer that committed since makes it fail and
        nothing is written. The cursor moves with every change to a stream's
        exported state, so reads that saw it at that position saw what the lock
        would have kept; what it does not guard (a review case's revision, the cited
        captures) the statement checks or locks itself. ``LockNeeded`` (raised by a
        read that needs the lock, a stream's first write, such a failed write) makes
        this unit forget everything and run ``work`` again under the lock: the same
        work, in two round trips instead of three or more, or in as many as before.
        A refusal raised by ``work`` from what it read is final, as it would have
        been under the lock at the moment of the read; one raised in a unit that
        presumed something (``Unlocked.presumed``) before its write was sent is not,
        and the work is done again under the lock.
        """
        if not self._unlocked_reads or self._writers or self._deferred != [BEGIN]:
            return work()
        self._deferred.clear()  # each read is a transaction of its own
        unlocked = self._unlocked = Unlocked(self._require())
        try:
            return work()
        except LockNeeded:
            pass
        except Exception:
            # A refusal from what was presumed rather than read may not be the one the
            # lock gives (another check of the same work may come first): only one
            # from what was read is final. Nothing was sent to be written yet.
            if not unlocked.presumed or unlocked.sent:
                raise
        self._holds.close()  # the pauses' work in flight, entered again below
        self._reset()
        return work()

    def _require(self) -> psycopg.Connection:
        if self._conn is None:
            raise RuntimeError("UnitOfWork used outside its with-block")
        return self._conn

    def stream(self, tenant_id: str, catalog_id: str) -> StreamWriter:
        """The writer of this tenant/catalog's current stream, locking its cursor.

        The first call for a stream takes the cursor lock; call it before reading or
        changing the facts the events describe. A transaction touching several
        streams must request them in sorted order, so two such transactions cannot
        deadlock on each other's cursor rows. A cached epoch that was fenced meanwhile
        is looked up again and the current epoch's stream is locked instead. A paused
        catalog raises ``StreamPaused`` before anything is locked; otherwise the work
        is counted as in flight until the unit of work ends, so the pause is
        acknowledged only after this commits or rolls back. A stream flagged rewound
        (its history went back without a fence, ``db.control.epochs``) raises
        ``HistoryRewound``, naming the fence that fixes it; the flag is read with the
        cached epoch, so one raised elsewhere refuses writes here within the cache's
        time to live.
        """
        key = (tenant_id, catalog_id)
        writer = self._writers.get(key)
        if writer is None and self._unlocked is not None and key in contended:
            raise LockNeeded(f"{tenant_id}/{catalog_id}'s writers meet each other lately")
        if writer is None:
            if self._pauses is not None:
                self._holds.enter_context(self._pauses.working([key]))
            epoch, issued = self._epochs.epoch_for_write(tenant_id, catalog_id)
            try:
                writer = self._open_stream(self._require(), StreamId(tenant_id, catalog_id, epoch))
            except StreamFenced as fenced:
                # The cached epoch was fenced meanwhile: nothing was written yet, so
                # the write goes to the current epoch's stream (its cursor from 0).
                current = self._epochs.epochs([key], refresh=True).get(key, epoch)
                if current < fenced.fenced_for_epoch:
                    raise
                epoch, issued = current, True
                writer = self._open_stream(self._require(), StreamId(tenant_id, catalog_id, epoch))
            rewound = self._epochs.rewound(tenant_id, catalog_id, epoch) if issued else None
            if rewound is not None:
                raise HistoryRewound(f"nothing was written: {rewound.describe()}")
            if not issued and self._unlocked is not None:
                raise LockNeeded(f"{tenant_id}/{catalog_id}'s first epoch is to be issued")
            self._writers[key] = writer
            if not issued:
                self._unissued.add(key)
        return writer

    def _open_stream(self, conn: psycopg.Connection, stream: StreamId) -> StreamWriter:
        """Lock the stream's cursor and return its writer: one round trip with what is
        queued before it (the transaction's BEGIN at least). The benchmark's baseline
        overrides this to measure the same write path without the cursor."""
        if self._unlocked is not None:  # its cursor is read with the next read
            writer = StreamWriter(conn, stream, 0, self._codec, self._notifier is None)
            self._unlocked.opened(writer)
            return writer
        with conn.pipeline():
            self.tx.send_deferred()
            requested = request_cursor_lock(conn, stream)
        cursor = locked_cursor(conn, stream, requested)
        return StreamWriter(conn, stream, cursor, self._codec, self._notifier is None)

    def commit(self) -> list[Envelope]:
        """Write every stream's outbox rows, then COMMIT.

        1. each stream writer allocates positions and inserts its outbox rows;
        2. only for a catalog written for the first time: check the deferred
           constraints now (``SET CONSTRAINTS ALL IMMEDIATE``), so a refusal cannot
           come after the next step, then issue its first epoch in the control
           database; if someone issued another epoch meanwhile, roll back;
        3. COMMIT makes facts, outbox rows and cursors visible together (sent with
           step 1's statements in one round trip when step 2 has nothing to do);
        4. remember where each stream's cursor is now (``db.unlocked.known_cursors``:
           this process's next unlocked unit of the stream need not read it), and,
           with a notifier, hand it the streams written, to wake the relay.
        An unlocked unit does steps 1 and 3 as one statement (``Unlocked.commit``).
        A commit that fails forgets those streams' cursors: the outcome may be unknown.
        A crash before step 2 leaves nothing behind; one between steps 2 and 3 leaves
        an issued first epoch and no write, which is what an operator issuing it would
        leave (the write itself was accepted; nothing refused ever issues an epoch).
        One between steps 3 and 4 leaves the relay to find the rows on its next poll.
        """
        try:
            if self._unlocked is not None:
                envelopes = self._unlocked.commit(list(self._writers.values()), self._deferred)
            else:
                envelopes = self._commit_locked()
        except BaseException:
            known_cursors.forget(w.stream for w in self._writers.values())
            raise
        self._committed = True
        for writer in self._writers.values():  # where the next unit may write from
            known_cursors.record(writer.stream, writer.cursor)
        if self._notifier is not None:
            self._notifier.announce(str(w.stream) for w in self._writers.values())
        self.envelopes = envelopes
        return envelopes

    def _commit_locked(self) -> list[Envelope]:
        """Steps 1-3 of ``commit`` under the cursor locks."""
        conn = self._require()
        envelopes: list[Envelope] = []
        # One round trip: what is queued, the outbox statements and, unless a first
        # epoch is to be issued in between, the COMMIT; an error in any of them is
        # raised here, and the COMMIT then rolls back.
        with conn.pipeline():
            self.tx.send_deferred()
            for writer in self._writers.values():
                envelopes.extend(writer.flush())
            if not self._unissued:
                conn.execute(COMMIT)
        if self._unissued:
            conn.execute("SET CONSTRAINTS ALL IMMEDIATE")
            for tenant_id, catalog_id in sorted(self._unissued):
                issued = self._epochs.issue_first(tenant_id, catalog_id)
                if issued != FIRST_EPOCH:
                    raise EpochChanged(
                        f"{tenant_id}/{catalog_id} is at history epoch {issued} now;"
                        f" this write was prepared for epoch {FIRST_EPOCH}: retry it"
                    )
            conn.commit()
        return envelopes

    def rollback(self) -> None:
        self._require().rollback()
        self._writers.clear()
        self._deferred[:] = [BEGIN]
        self._unlocked = None
        self._groups.clear()
        self._own.clear()
