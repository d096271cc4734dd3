"""One holder among several processes: a session-level advisory lock on a connection
of its own.

Work that every instance of a process could do, and that is wasted when several do
it (the agents' progress reports and gap closing), runs only in the instance that
holds the leadership. Leadership is ``pg_try_advisory_lock`` on a name, held for as long
as the holder's connection lives; nothing is written, so nothing needs cleaning up.

What ends a holding:
- the holder dies (SIGKILL included): its socket closes, PostgreSQL ends the
  backend and the lock with it; the next instance to ask takes the leadership;
- PostgreSQL restarts: every connection ends; whoever asks first after it takes it;
- the holder's network goes (no FIN ever arrives): the server's TCP keepalives,
  set short on this connection, end the backend within about
  ``KEEPALIVE_IDLE_S + KEEPALIVE_INTERVAL_S * KEEPALIVE_COUNT`` seconds; the holder
  itself finds out at its next check (which fails) and stops doing the work.

Leadership makes duplicate work rare, not impossible: a holder whose check passed a
moment before it lost the connection may finish one pass while another instance
starts one. The work it guards must stay correct when done twice (the applier's
progress-row lock and the resolver's monotone progress make the agents' so); the
leadership only saves the time.

``Leaderships`` holds any number of names on one session (one lock per name): a worker's
claims on the rebuilds it carries out, say, where a ``Leadership`` per name would cost a
connection per rebuild and worker.
"""

from __future__ import annotations

import contextlib
import logging
import threading

import psycopg

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5
KEEPALIVE_IDLE_S = 10
KEEPALIVE_INTERVAL_S = 5
KEEPALIVE_COUNT = 3


def _session(dsn: str, application_name: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(
        dsn,
        autocommit=True,
        connect_timeout=CONNECT_TIMEOUT_S,
        application_name=application_name[:63],
        # Server side: a holder whose network went is noticed and its lock freed.
        options=(
            f"-c tcp_keepalives_idle={KEEPALIVE_IDLE_S}"
            f" -c tcp_keepalives_interval={KEEPALIVE_INTERVAL_S}"
            f" -c tcp_keepalives_count={KEEPALIVE_COUNT}"
        ),
    )


class Leadership:
    """``held()`` answers whether this process leads ``name`` now, taking it
    when it is free. Safe to call from several threads."""

    def __init__(self, dsn: str, name: str) -> None:
        self._dsn = dsn
        self.name = name
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._holding = False
        self._lock = threading.Lock()

    def held(self) -> bool:
        with self._lock:
            # A session that ended while idle is only found out by using it: then one
            # more try on a new one, so an instance asks PostgreSQL, not a dead socket.
            for attempt in (1, 2):
                reused = self._conn is not None and not self._conn.closed
                try:
                    return self._check()
                except psycopg.Error as exc:
                    if self._holding:
                        log.warning("leadership %s lost: %s", self.name, exc)
                    self._drop()
                    if not reused or attempt == 2:
                        return False
            return False

    def _check(self) -> bool:
        if self._conn is None or self._conn.closed:
            self._holding = False
            self._conn = _session(self._dsn, f"leader:{self.name}")
        if self._holding:
            # The lock lives as long as this session: one answer proves both.
            self._conn.execute("SELECT 1").fetchone()
            return True
        row = self._conn.execute(
            "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (self.name,)
        ).fetchone()
        self._holding = bool(row and row[0])
        if self._holding:
            log.info("leadership %s taken", self.name)
        return self._holding

    def _drop(self) -> None:
        self._holding = False
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
        self._conn = None

    def release(self) -> None:
        """Give the leadership up (closing the session frees the lock)."""
        with self._lock:
            self._drop()


class Leaderships:
    """Several leaderships on one session of its own, named ``application_name``.

    ``take(name)`` answers whether this process holds ``name`` now, taking it when it
    is free; ``release(name)`` gives one up. When the session ends, every leadership held
    on it ends with it: the next ``take`` asks again on a new session, where another
    instance may have taken it meanwhile. Safe to call from several threads."""

    def __init__(self, dsn: str, application_name: str) -> None:
        self._dsn = dsn
        self.application_name = application_name
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._held: set[str] = set()
        self._lock = threading.Lock()

    def take(self, name: str) -> bool:
        with self._lock:
            # As ``Leadership.held``: a session that ended while idle is found out by using
            # it, then one more try on a new one.
            for attempt in (1, 2):
                reused = self._conn is not None and not self._conn.closed
                try:
                    return self._take(name)
                except psycopg.Error as exc:
                    if self._held:
                        log.warning("leaderships %s lost: %s", sorted(self._held), exc)
                    self._drop()
                    if not reused or attempt == 2:
                        return False
            return False

    def _take(self, name: str) -> bool:
        if self._conn is None or self._conn.closed:
            self._held.clear()
            self._conn = _session(self._dsn, self.application_name)
        if name in self._held:
            # The locks live as long as this session: one answer proves them all.
            self._conn.execute("SELECT 1").fetchone()
            return True
        row = self._conn.execute(
            "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (name,)
        ).fetchone()
        if row and row[0]:
            self._held.add(name)
            log.info("leadership %s taken", name)
            return True
        return False

    def held(self) -> frozenset[str]:
        """The names taken and not given up, as of the session's last answer."""
        with self._lock:
            return frozenset(self._held)

    def release(self, name: str) -> None:
        with self._lock:
            if name not in self._held:
                return
            self._held.discard(name)
            if self._conn is None or self._conn.closed:
                return
            try:
                self._conn.execute(
                    "SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (name,)
                ).fetchone()
            except psycopg.Error:
                self._drop()  # the session is gone, and its locks with it

    def _drop(self) -> None:
        self._held.clear()
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
        self._conn = None

    def close(self) -> None:
        """Give every leadership up (closing the session frees the locks)."""
        with self._lock:
            self._drop()
