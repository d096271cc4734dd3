"""Waking the relay after a commit, from outside the committing transaction.

A transaction that calls ``pg_notify`` takes a database-wide lock when it commits and
keeps it until its commit record is on disk, so that notifications are queued in
commit order. Writers that notify inside their transactions therefore commit one at
a time and never share a WAL flush: at one-item decisions that lock, not the cursor,
caps how many decisions a second the resolver commits.

A process that writes many transactions (the resolver API, the capture worker) gives
its Units of Work one ``CommitNotifier``: after a COMMIT the Unit of Work hands it the
streams it wrote, and the notifier's own thread sends one ``pg_notify`` from a
connection of its own, coalescing what piles up while it sends. A notification only
wakes the relay; its payload, the streams one per line (``payload``), is for people
reading the channel. One notification a send rather than one a stream: eight writers'
streams had cost an array parameter in the writing process and eight notifications
for the relay to drain, at each send. The relay still polls every
``GAPLESS_RELAY_POLL_SECONDS``.

A send is a transaction of its own (a statement, a COMMIT that flushes WAL) and, in
the writing process, a thread wake-up and a statement's client work: at one-item
decisions it cost about a third as much CPU as the decision itself when it went out
after every commit. So after a send the thread gathers for ``gather_seconds`` before
the next one: a commit after a quiet spell is announced at once, and at a high rate
the commits of those few milliseconds share one send (and the relay, one pass).

What a crash or a fault leaves: a commit whose notification was never sent (the
process died between its COMMIT and the send, or the notifier's connection was
down), or a send PostgreSQL lost in its own crash (the notifier does not wait for
its sends to reach the disk: ``CommitNotifier.connect``). Its rows are in the outbox;
the relay publishes them on its next poll, later than usual but never lost or
doubled. A notification is never sent for a
transaction that did not commit: the Unit of Work hands streams over only after
COMMIT returned.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

import psycopg

from db.stream_writer import NOTIFY_CHANNEL

log = logging.getLogger(__name__)

RETRY_PAUSE_SECONDS = 0.5
"""How long the notifier waits after a failed send before it connects again."""
CONNECT_TIMEOUT_SECONDS = 5
GATHER_SECONDS = 0.005
"""After a send, how long the commits that follow wait to share the next one."""
PAYLOAD_BYTES = 7_900
"""At most this much of a notification's payload names streams (PostgreSQL refuses
one of 8,000 bytes or more); the streams beyond are counted, not named."""


def payload(streams: list[str]) -> str:
    """A send's payload: the streams one per line, in order, as many as fit in
    ``PAYLOAD_BYTES``, then ``… and N more`` for those left out."""
    text = "\n".join(streams)
    if len(text.encode()) <= PAYLOAD_BYTES:
        return text
    named, size = [], 0
    for stream in streams:
        size += len(stream.encode()) + 1
        if size > PAYLOAD_BYTES - 40:  # room for the count
            break
        named.append(stream)
    return "\n".join([*named, f"… and {len(streams) - len(named)} more"])


class CommitNotifier:
    """One thread and one autocommit connection that announce committed streams."""

    def __init__(
        self,
        conninfo: str,
        name: str = "commit-notifier",
        gather_seconds: float = GATHER_SECONDS,
    ) -> None:
        self._conninfo = conninfo
        self._name = name
        self._gather_seconds = gather_seconds
        self._pending: set[str] = set()
        self._wake = threading.Condition()
        self._closed = False
        # Set by ``close`` only (an announcement does not end a gathering pause).
        self._closing = threading.Event()
        self._conn: psycopg.Connection | None = None
        self.sent = 0
        """Streams announced so far (for tests and metrics)."""
        self.sends = 0
        """Notifications that announced them: fewer than ``sent`` when commits were
        gathered."""
        self._thread: threading.Thread | None = None

    def start(self) -> CommitNotifier:
        """Start sending (what was announced before is sent then); again after a
        ``close`` (an application's lifespan can run more than once)."""
        with self._wake:
            if self._thread is not None and self._thread.is_alive():
                return self
            self._closed = False
            self._closing.clear()
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        return self

    def announce(self, streams: Iterable[str]) -> None:
        """Queue a notification for each of ``streams`` (committed); never blocks on I/O."""
        with self._wake:
            self._pending.update(streams)
            self._wake.notify()

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued, then stop the thread and close its connection."""
        with self._wake:
            self._closed = True
            self._closing.set()
            self._wake.notify()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._pending and not self._closed:
                    self._wake.wait()
                if not self._pending and self._closed:
                    break
                streams, self._pending = sorted(self._pending), set()
            sent_at = time.monotonic()
            if not self._send(streams):
                with self._wake:
                    if self._closed:
                        break
                    self._wake.wait(RETRY_PAUSE_SECONDS)
                continue
            # Gather what the next few milliseconds commit into the next send; a close
            # cuts the pause short and what was announced is still sent.
            pause = self._gather_seconds - (time.monotonic() - sent_at)
            if pause > 0:
                self._closing.wait(pause)
        if self._conn is not None:
            self._conn.close()

    def connect(self) -> psycopg.Connection:
        """The notifier's connection: autocommit, and its commits not waiting for
        their WAL to reach the disk (``synchronous_commit = off``). A notification
        is a hint; one lost in a crash costs the relay a poll. Waiting would make each
        send a WAL flush of its own, and hold the database-wide NOTIFY lock through
        it."""
        conn = psycopg.connect(
            self._conninfo,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            application_name=self._name,
        )
        conn.execute("SET synchronous_commit = off")
        return conn

    def _send(self, streams: list[str]) -> bool:
        """One notification naming every queued stream; False (and nothing retried:
        the relay's poll finds the rows) if the database could not be reached."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = self.connect()
            self._conn.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, payload(streams)))
        except psycopg.Error as exc:
            log.warning("could not wake the relay for %d stream(s): %s", len(streams), exc)
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            return False
        self.sent += len(streams)
        self.sends += 1
        return True
