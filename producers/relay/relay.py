"""The relay loop: claim a stream, publish the rows above its published position in
order, then move the position."""

from __future__ import annotations

import logging
import select
import threading
import time
from collections.abc import Callable

import psycopg
from prometheus_client import Counter, Gauge

from db.outbox import (
    OutboxRow,
    mark_published,
    published_position,
    read_after,
    streams_with_unpublished,
    try_claim_stream,
)
from db.stream_writer import NOTIFY_CHANNEL, StreamId
from producers.relay.exceptions import OutboxGap, RelayError
from producers.relay.publisher import Publisher
from producers.relay.settings import DEFAULT_BATCH_SIZE

log = logging.getLogger(__name__)

PUBLISHED = Counter(
    "gapless_relay_published_total", "Outbox rows published and recorded as published"
)
FAILURES = Counter(
    "gapless_relay_publish_failures_total", "Batches not published (Kafka or an outbox gap)"
)
LAST_PASS = Gauge("gapless_relay_last_pass_timestamp", "Unix time of the last completed pass")

# Hook between "Kafka confirmed" and "position recorded": the fault-injection tests kill
# the process here to prove a crash at this point only causes re-publication.
AfterPublish = Callable[[StreamId, list[OutboxRow]], None]


class Relay:
    def __init__(
        self,
        dsn: str,
        publisher: Publisher,
        batch_size: int = DEFAULT_BATCH_SIZE,
        poll_seconds: float = 1.0,
        after_publish: AfterPublish | None = None,
    ) -> None:
        self._dsn = dsn
        self._publisher = publisher
        self._batch_size = batch_size
        self._poll_seconds = poll_seconds
        self._after_publish = after_publish
        self._conn: psycopg.Connection | None = None
        self.last_pass = 0.0

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self._dsn)
        return self._conn

    def publish_stream(self, conn: psycopg.Connection, stream: StreamId) -> int:
        """Publish one batch of a stream; returns how many rows it published.

        One transaction:
        1. claim the stream (advisory lock for this transaction) or skip it;
        2. read its published position P, then up to ``batch_size`` rows above P in
           position order, and check they are exactly P+1 … P+n;
        3. produce them in that order and wait for every delivery report;
        4. move the published position to P+n (one single-row UPDATE, never
           backwards); COMMIT releases the claim.
        What a crash leaves: before 3, nothing sent and nothing recorded (the server
        drops the claim with the connection); during 3 or after it and before 4's
        COMMIT, some or all of P+1 … P+n in Kafka with the position still at P, so
        the next claim sends them again and consumers drop the duplicates by event
        id. A failed or missing delivery report raises before 4, so no position is
        recorded that Kafka did not confirm. Never loss: a position only moves past
        rows whose every delivery was confirmed. Nothing here locks a row a writer
        locks, so writers and the relay never wait for each other.
        """
        with conn.transaction():
            if not try_claim_stream(conn, stream):
                return 0
            after = published_position(conn, stream)
            rows = read_after(conn, stream, after, self._batch_size)
            if not rows:
                return 0
            last = rows[-1].position
            if rows[0].position != after + 1 or last != after + len(rows):
                raise OutboxGap(
                    f"{stream}: rows above published position {after} are"
                    f" {rows[0].position}…{last}, {len(rows)} of them"
                )
            self._publisher.publish(rows)
            if self._after_publish is not None:
                self._after_publish(stream, rows)
            mark_published(conn, stream, last)
        PUBLISHED.inc(len(rows))
        return len(rows)

    def run_once(self) -> int:
        """One pass over every stream with unpublished rows; returns rows published."""
        conn = self._connection()
        with conn.transaction():
            streams = streams_with_unpublished(conn, limit=1000)
        total = 0
        for stream in streams:
            try:
                total += self.publish_stream(conn, stream)
            except RelayError as exc:
                FAILURES.inc()
                log.warning("publish failed for %s, will retry: %s", stream, exc)
        self.last_pass = time.time()
        LAST_PASS.set(self.last_pass)
        return total

    def run(self, stop: threading.Event) -> None:
        """Publish until ``stop`` is set; wake on NOTIFY, and poll in any case."""
        listener = psycopg.connect(self._dsn, autocommit=True)
        listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
        try:
            while not stop.is_set():
                published = self.run_once()
                if published >= self._batch_size:
                    continue  # a backlog: go again without waiting
                self._wait_for_notify(listener, stop)
        finally:
            listener.close()
            if self._conn is not None:
                self._conn.close()

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
                    return
