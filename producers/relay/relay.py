"""The relay loop: claim a stream, publish the rows above its published position in
order, then move the position."""

from __future__ import annotations

import logging
import select
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
from prometheus_client import Counter, Gauge

from db.control.pauses import PauseWatch
from db.resolver.outbox import (
    ClaimedStream,
    OutboxRow,
    StoredRow,
    claim_streams,
    mark_published_all,
    request_ranges,
    streams_with_unpublished,
)
from db.stream_writer import NOTIFY_CHANNEL
from producers.relay.exceptions import OutboxGap, PublishFailed, RelayError
from producers.relay.publisher import Publisher
from producers.relay.settings import DEFAULT_BATCH_SIZE, DEFAULT_GATHER_SECONDS, READ_CHUNK
from schemas.backoff import Reconnect
from schemas.ids import StreamId
from schemas.latency import Latencies
from schemas.logs import event_fields

log = logging.getLogger(__name__)

PUBLISHED = Counter(
    "gapless_relay_published_total", "Outbox rows published and recorded as published"
)
FAILURES = Counter(
    "gapless_relay_publish_failures_total", "Batches not published (Kafka or an outbox gap)"
)
LAST_PASS = Gauge("gapless_relay_last_pass_timestamp", "Unix time of the last completed pass")
COMMIT_TO_PUBLISHED = Latencies(
    "gapless_relay_commit_to_published_seconds",
    "Seconds from a row's commit by the writer to Kafka's confirmation of it",
)
DISCONNECTS = Counter(
    "gapless_relay_disconnects_total", "Times the relay lost (or could not reach) its database"
)

# Errors of a lost or unreachable server (refused, restarted, shut down mid-statement):
# the loop reconnects after them; anything else is a bug and stops the process.
CONNECTION_LOST = (psycopg.OperationalError, psycopg.InterfaceError)
CONNECT_TIMEOUT_SECONDS = 10
BEGIN, COMMIT = "BEGIN", "COMMIT"

# Hook between "Kafka confirmed" and "position recorded": the fault-injection tests kill
# the process here to prove a crash at this point only causes re-publication.
AfterPublish = Callable[[StreamId, list[OutboxRow]], None]


class Relay:
    def __init__(
        self,
        dsn: str,
        publisher: Publisher,
        batch_size: int = DEFAULT_BATCH_SIZE,
        read_chunk: int = READ_CHUNK,
        poll_seconds: float = 1.0,
        after_publish: AfterPublish | None = None,
        reconnect: Reconnect | None = None,
        pauses: PauseWatch | None = None,
        gather_seconds: float = DEFAULT_GATHER_SECONDS,
    ) -> None:
        self._dsn = dsn
        self._gather_seconds = gather_seconds
        self._pass_started = 0.0  # monotonic
        self._pauses = pauses
        self._publisher = publisher
        self._batch_size = batch_size
        self._read_chunk = read_chunk
        self._poll_seconds = poll_seconds
        self._after_publish = after_publish
        self._conn: psycopg.Connection | None = None
        self._turn = 0
        self._reconnect = reconnect or Reconnect()
        self.last_pass = 0.0
        # Unix times: the loop last went round (liveness), a pass last completed (ready).
        self.last_loop = 0.0

    @property
    def connected(self) -> bool:
        """False from a lost connection until a pass succeeds again (health: not ready)."""
        return self._reconnect.connected

    def _connection(self) -> psycopg.Connection:
        """The relay's connection, in autocommit mode: a pass's transaction is opened
        and closed by statements of its own (``_publish_claimed``), and its listing is
        one statement outside any."""
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self._dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS
            )
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def publish_stream(self, conn: psycopg.Connection, stream: StreamId) -> int:
        """Publish one batch of one stream; returns how many rows it published."""
        return self.publish_streams(conn, [stream])

    def publish_streams(self, conn: psycopg.Connection, streams: list[StreamId]) -> int:
        """Publish up to ``batch_size`` rows from several streams in one transaction.

        ``conn`` is the relay's own connection (``_connection``: autocommit mode; the
        transaction is opened and closed by statements of its own).

        0. leave out the streams of paused catalogs (``db.control.pauses``), and count the
           others as in flight until the batch ends, so a pause is acknowledged only
           once nothing of it is being published;
        1. claim each stream (advisory lock for this transaction) or skip it, and skip
           it too if its epoch is fenced (the fence takes the same claim, so a batch
           in flight finishes before a fence and none starts after it); read its
           published position P and its cursor C after the claims, then the rows
           P+1 … min(C, P + what is left of the batch) in position order, a chunk
           of ``READ_CHUNK`` rows at a time (every chunk's read sent at once, so
           the server reads the next while this thread sends the last), and check
           each chunk's rows are exactly the next ones — a stream whose rows do not
           line up is skipped from there on and reported (``OutboxGap``); the
           claims are one statement for every stream, and so is each chunk's read;
        2. hand each chunk to the producer as soon as its rows are in, each stream
           in its own order (so Kafka takes one chunk while the next is taken),
           and after the last one wait once for every delivery report;
        3. move each stream's published position to the end of what it sent (one
           statement, a row per stream, never backwards); COMMIT releases the claims.
        What a crash leaves: before 2, nothing sent and nothing recorded (the server
        drops the claims with the connection); during 2 or after it and before 3's
        COMMIT, some or all rows in Kafka with every position unchanged, so the next
        claims send them again and consumers drop the duplicates by event id. A
        failed or missing delivery report raises before 3, so no position moves past
        a row Kafka did not confirm. Waiting once for several streams is what keeps
        the relay close to a bare producer. Nothing here locks a row a writer locks,
        so writers and the relay never wait for each other.
        """
        keys = {(s.tenant_id, s.catalog_id) for s in streams}
        with self._unpaused(keys) as allowed:
            return self._publish_claimed(
                conn, [s for s in streams if (s.tenant_id, s.catalog_id) in allowed]
            )

    @contextmanager
    def _unpaused(self, keys: set[tuple[str, str]]) -> Iterator[frozenset[tuple[str, str]]]:
        if self._pauses is None:
            yield frozenset(keys)
            return
        with self._pauses.working_on_unpaused(keys) as allowed:
            yield allowed

    def _publish_claimed(self, conn: psycopg.Connection, streams: list[StreamId]) -> int:
        # One pipeline for the whole transaction, opened and closed by statements of
        # its own on the autocommit connection: BEGIN goes with the claims and COMMIT
        # with the position moves, so each step is one database round trip (psycopg's
        # implicit BEGIN would wait for its own answer), and none is per stream.
        confirmed = 0.0
        try:
            with conn.pipeline():
                conn.execute(BEGIN)
                sent, after = self._send_claimed(conn, streams)
                if sent:
                    self._publisher.confirm()
                    confirmed = time.time()
                    if self._after_publish is not None:
                        for stream, rows in sent.items():
                            self._after_publish(stream, [OutboxRow._make(row) for row in rows])
                    mark_published_all(conn, [(stream, after[stream]) for stream in sent])
                conn.execute(COMMIT)
        except BaseException:
            # Nothing recorded: the claims go with the ROLLBACK (or with the connection,
            # if that is what failed), and the rows sent are sent again next time.
            if not conn.closed:
                conn.rollback()
            raise
        total = sum(len(rows) for rows in sent.values())
        if total:
            PUBLISHED.inc(total)
            COMMIT_TO_PUBLISHED.observe(
                [confirmed - row[5] for rows in sent.values() for row in rows]
            )
        return total

    def _send_claimed(
        self, conn: psycopg.Connection, streams: list[StreamId]
    ) -> tuple[dict[StreamId, list[StoredRow]], dict[StreamId, int]]:
        """Steps 1 and 2 of ``publish_streams`` inside its transaction: the rows handed
        to the producer per stream, and the position each stream was sent through."""
        sent: dict[StreamId, list[StoredRow]] = {}
        skipped: set[StreamId] = set()
        waiting = []
        for c in claim_streams(conn, streams):
            if c.fenced:  # fenced after it was listed: never again
                log.warning("%s is fenced: its unpublished rows stay unpublished", c.stream)
            elif c.cursor > c.published:
                waiting.append(c)
        after = {c.stream: c.published for c in waiting}
        budget = self._batch_size
        while waiting and budget > 0:
            # Every chunk's read goes out at once: the server reads chunk k+1 while
            # this thread hands chunk k to the producer, and librdkafka ships it. A
            # stream found with a gap is skipped from there on (what it read after
            # that is dropped, what it sent before is published), and the rows it
            # would have sent go to the others in a next round.
            chunks = self._chunks(waiting, after, budget)
            for plan, rows_of in [(plan, request_ranges(conn, plan)) for plan in chunks]:
                for (stream, first_after, through), rows in zip(plan, rows_of(), strict=True):
                    if stream in skipped:
                        continue
                    expected = through - first_after
                    if rows and rows[0][0] == first_after + 1 and len(rows) == expected:
                        self._publisher.send(rows)
                        sent.setdefault(stream, []).extend(rows)
                        after[stream] = through
                        budget -= expected
                        continue
                    skipped.add(stream)
                    FAILURES.inc()
                    found = f"{rows[0][0]}…{rows[-1][0]}" if rows else "none"
                    log.error(
                        "%s",
                        OutboxGap(
                            f"{stream}: rows {first_after + 1}…{through} above published"
                            f" position {first_after} expected, {len(rows)} found"
                            f" ({found}); skipped"
                        ),
                        extra=event_fields(stream, first_after + 1),
                    )
            waiting = [c for c in waiting if c.stream not in skipped and after[c.stream] < c.cursor]
        return sent, after

    def _chunks(
        self, waiting: list[ClaimedStream], published: dict[StreamId, int], budget: int
    ) -> list[list[tuple[StreamId, int, int]]]:
        """The reads of up to ``budget`` rows over the ``waiting`` streams in their
        order, after the positions in ``published``, in chunks of at most
        ``read_chunk`` rows, each chunk a list of ``(stream, after, through)``."""
        after = dict(published)
        chunks = []
        while waiting and budget > 0:
            room = min(budget, self._read_chunk)
            plan: list[tuple[StreamId, int, int]] = []
            for c in waiting:
                if room == 0:
                    break
                take = min(c.cursor - after[c.stream], room)
                plan.append((c.stream, after[c.stream], after[c.stream] + take))
                after[c.stream] += take
                room -= take
                budget -= take
            chunks.append(plan)
            waiting = [c for c in waiting if after[c.stream] < c.cursor]
        return chunks

    def run_once(self) -> int:
        """One pass over every stream with unpublished rows; returns rows published."""
        conn = self._connection()
        streams = streams_with_unpublished(conn, limit=1000)  # one statement, no transaction
        # One batch per pass across the streams, starting one stream later each pass
        # so that a busy stream early in the list cannot starve the others.
        if streams:
            self._turn = (self._turn + 1) % len(streams)
            streams = streams[self._turn :] + streams[: self._turn]
        total = 0
        try:
            total = self.publish_streams(conn, streams)
        except PublishFailed as exc:
            # Not a completed pass: while the broker confirms nothing (down, or silent
            # past the delivery timeout) the relay must not look ready.
            FAILURES.inc()
            log.warning("publish failed, will retry: %s", exc)
            return total
        except RelayError as exc:
            FAILURES.inc()
            log.warning("publish failed, will retry: %s", exc)
        self.last_pass = time.time()
        LAST_PASS.set(self.last_pass)
        return total

    def run(self, stop: threading.Event) -> None:
        """Publish until ``stop`` is set; wake on NOTIFY, and poll in any case.

        A pass woken by NOTIFY begins no sooner than ``gather_seconds`` after the
        previous pass began (``_gather``): under a steady stream of small commits the
        relay makes one pass for the commits of that interval instead of one for each
        (at 1,000 events/s of one-item decisions, 20 ms cut the relay's CPU per event
        from about 230 to 70-90 µs, and PostgreSQL's and the broker's with it). An
        idle relay's pass is not delayed, nor is a backlog's next batch. The wait holds
        nothing: a crash during it leaves the rows unpublished, as before any pass.

        A lost database (down at start-up, restarted while the relay waits for NOTIFY
        or in the middle of a pass) never ends the loop: both connections are dropped,
        ``connected`` turns false, and after a bounded, jittered pause
        (``schemas.backoff.Reconnect``) the relay connects and listens again. A pass cut
        off mid-batch never committed its position moves, so the next pass publishes
        those rows again and consumers drop the duplicates by event id. Any other
        database error (a database restored in place, its tables briefly missing)
        is logged and retried the same way.
        """
        listener: psycopg.Connection | None = None
        try:
            while not stop.is_set():
                self.last_loop = time.time()
                try:
                    if listener is None:
                        listener = psycopg.connect(
                            self._dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS
                        )
                        listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    self._pass_started = time.monotonic()
                    published = self.run_once()
                    if not self._reconnect.connected:
                        log.info("relay reconnected to its database")
                    self._reconnect.succeeded()
                    if published >= self._batch_size:
                        continue  # a backlog: go again without waiting
                    self._wait_for_notify(listener, stop)
                except CONNECTION_LOST as exc:
                    DISCONNECTS.inc()
                    pause = self._reconnect.failed()
                    log.warning("relay lost its database (%s); reconnecting in %.1fs", exc, pause)
                    if listener is not None:
                        listener.close()
                        listener = None
                    self._close()
                    stop.wait(pause)
                except psycopg.Error as exc:
                    # A database that answers but not as the relay expects: its tables
                    # missing while it is restored in place, say. Nothing was
                    # committed; the relay reports it and tries again, it never exits.
                    FAILURES.inc()
                    pause = self._reconnect.failed()
                    log.error("relay pass failed (%s); trying again in %.1fs", exc, pause)
                    self._close()
                    stop.wait(pause)
        finally:
            if listener is not None:
                listener.close()
            self._close()

    def _gather(self, stop: threading.Event) -> bool:
        """After a NOTIFY, let ``gather_seconds`` pass since the last pass began: the
        commits that arrive meanwhile are published by one pass instead of one each.
        Whether it waited (their notifications are then dropped: the pass reads what
        they announce)."""
        pause = self._pass_started + self._gather_seconds - time.monotonic()
        if pause <= 0:
            return False
        stop.wait(pause)
        return True

    def _wait_for_notify(self, listener: psycopg.Connection, stop: threading.Event) -> None:
        deadline = time.monotonic() + self._poll_seconds
        while not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            # Short slices so SIGTERM (which sets ``stop``) is honoured promptly.
            ready, _, _ = select.select([listener.fileno()], [], [], min(remaining, 0.2))
            if ready:
                notified = False
                for _ in listener.notifies(timeout=0, stop_after=1000):
                    notified = True
                if notified:
                    if self._gather(stop):
                        # What was announced meanwhile is what the coming pass reads.
                        for _ in listener.notifies(timeout=0, stop_after=1000):
                            pass
                    return
