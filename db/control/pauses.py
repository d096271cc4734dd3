"""Pausing a catalog's processing while it is restored, and the processes that honour it.

The pause lives in the control database, the one that is never restored with the
resolver database, so a restore cannot undo it. An operator (``gapless pause``, or
``gapless fence-epoch`` as its first step) opens a pause and publishes a PAUSE on
the control topic; every process that writes, publishes, applies or serves the
catalog holds a ``PauseWatch``, which hears the command (and, should the message be
lost or the broker away, finds the pause on its next poll of the database), stops
starting work on the catalog, waits for the work it had started to finish, and then
acknowledges (``pause_ack``). ``wait_acknowledged`` tells the operator when every
live process holds it; ``gapless status`` lists pauses and who holds them.

What a paused catalog means to each process: writers (the decision API, the capture
worker) refuse with ``STREAM_PAUSED`` (503, retry later; a capture job is kept and
retried); the relay leaves its rows unpublished; the agents leave its events
unapplied (progress stays where it was; after the resume the gap closer fetches
them from the resolver, where retention keeps them for this consumer); the read API
answers ``STREAM_BEING_RESTORED`` (503) rather than data a restore is replacing.
A rebuild is not paused: it is how a restore ends.

The pause is for consistency of what people see, not for safety: a write that
raced the pause still lands in the epoch the control database names, and the fence
(``db.resolver.fencing``) is what keeps an old epoch's history from being written or applied.

A crash of a process leaves its acknowledgement and instance row behind; an
instance not seen for ``LIVE_SECONDS`` is no longer waited for. A crash of the
operator's command between opening the pause and publishing it leaves the pause
open and unannounced: the processes find it on their next poll, and running the
command again publishes it again (opening is idempotent: it returns the open pause).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

import psycopg

from db.exceptions import StreamPaused

log = logging.getLogger(__name__)

Key = tuple[str, str]

LIVE_SECONDS = 15.0
"""An instance seen within this long is live: a pause waits for its acknowledgement."""


@dataclass(frozen=True, slots=True)
class Pause:
    pause_id: uuid.UUID
    tenant_id: str
    catalog_id: str
    paused_by: str
    reason: str
    paused_at: datetime
    resumed_by: str | None = None
    resumed_at: datetime | None = None

    @property
    def key(self) -> Key:
        return (self.tenant_id, self.catalog_id)


_COLUMNS = "pause_id, tenant_id, catalog_id, paused_by, reason, paused_at, resumed_by, resumed_at"


def _pause(row: tuple[object, ...]) -> Pause:
    return Pause(*row)  # type: ignore[arg-type]


def open_pause(
    conn: psycopg.Connection,
    tenant_id: str,
    catalog_id: str,
    actor: str,
    reason: str,
    pause_id: uuid.UUID | None = None,
) -> tuple[Pause, bool]:
    """The pause to hold the catalog by, and whether it was opened now.

    Idempotent: the pause ``pause_id`` when it exists (open or resumed: a procedure
    run again finds its own pause and does not pause twice), else the catalog's open
    pause (another operator's, which this one joins), else a new one. The unique
    index on open pauses decides between two operators opening at once.
    """
    if pause_id is not None:
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM stream_pause WHERE pause_id = %s", (pause_id,)
        ).fetchone()
        if row is not None:
            return _pause(row), False
    row = conn.execute(
        f"INSERT INTO stream_pause (pause_id, tenant_id, catalog_id, paused_by, reason)"
        f" VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING {_COLUMNS}",
        (pause_id or uuid.uuid4(), tenant_id, catalog_id, actor, reason),
    ).fetchone()
    if row is not None:
        return _pause(row), True
    existing = open_pause_of(conn, tenant_id, catalog_id)
    assert existing is not None, "an open pause conflicted and is gone"
    return existing, False


def open_pause_of(conn: psycopg.Connection, tenant_id: str, catalog_id: str) -> Pause | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM stream_pause"
        " WHERE tenant_id = %s AND catalog_id = %s AND resumed_at IS NULL",
        (tenant_id, catalog_id),
    ).fetchone()
    return None if row is None else _pause(row)


def resume(conn: psycopg.Connection, tenant_id: str, catalog_id: str, actor: str) -> Pause | None:
    """Close the catalog's open pause; None when it had none (resuming twice is fine)."""
    row = conn.execute(
        f"UPDATE stream_pause SET resumed_by = %s, resumed_at = clock_timestamp()"
        f" WHERE tenant_id = %s AND catalog_id = %s AND resumed_at IS NULL"
        f" RETURNING {_COLUMNS}",
        (actor, tenant_id, catalog_id),
    ).fetchone()
    return None if row is None else _pause(row)


def open_pauses(conn: psycopg.Connection) -> list[Pause]:
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM stream_pause WHERE resumed_at IS NULL"
        " ORDER BY tenant_id, catalog_id"
    ).fetchall()
    return [_pause(r) for r in rows]


def recently_resumed(conn: psycopg.Connection, within_seconds: float) -> list[Pause]:
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM stream_pause WHERE resumed_at"
        " > clock_timestamp() - make_interval(secs => %s)",
        (within_seconds,),
    ).fetchall()
    return [_pause(r) for r in rows]


def resumed_after_epoch(
    conn: psycopg.Connection, tenant_id: str, catalog_id: str, epoch: int
) -> Pause | None:
    """The catalog's pause resumed last after ``epoch`` was issued, if any: the end of
    the fence that issued it, whoever's pause the fence held (``infra.fence``)."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM stream_pause WHERE tenant_id = %s AND catalog_id = %s"
        " AND resumed_at > (SELECT issued_at FROM history_epoch_log WHERE tenant_id = %s"
        " AND catalog_id = %s AND epoch = %s) ORDER BY resumed_at DESC LIMIT 1",
        (tenant_id, catalog_id, tenant_id, catalog_id, epoch),
    ).fetchone()
    return None if row is None else _pause(row)


def heartbeat(conn: psycopg.Connection, instance_id: str, role: str) -> None:
    conn.execute(
        "INSERT INTO process_instance (instance_id, role) VALUES (%s, %s)"
        " ON CONFLICT (instance_id) DO UPDATE SET seen_at = clock_timestamp()",
        (instance_id, role),
    )


def acknowledge(
    conn: psycopg.Connection,
    pause_ids: Iterable[uuid.UUID],
    instance_id: str,
    role: str,
    state: str,
) -> None:
    conn.execute(
        "INSERT INTO pause_ack (pause_id, instance_id, state, role)"
        " SELECT p, %s, %s, %s FROM unnest(%b::uuid[]) AS p ON CONFLICT DO NOTHING",
        (instance_id, state, role, list(pause_ids)),
    )


@dataclass(frozen=True, slots=True)
class Holder:
    instance_id: str
    role: str
    acknowledged: bool


def holders(
    conn: psycopg.Connection,
    pause_id: uuid.UUID,
    state: str = "paused",
    live_seconds: float = LIVE_SECONDS,
) -> list[Holder]:
    """Every live instance (seen within ``live_seconds``) and whether it acknowledged
    ``state`` of the pause; instances that acknowledged and died since are listed too."""
    rows = conn.execute(
        "SELECT i.instance_id, i.role, a.instance_id IS NOT NULL FROM process_instance i"
        " LEFT JOIN pause_ack a ON a.instance_id = i.instance_id AND a.pause_id = %s"
        "  AND a.state = %s"
        " WHERE i.seen_at > clock_timestamp() - make_interval(secs => %s)"
        "  OR a.instance_id IS NOT NULL ORDER BY i.role, i.instance_id",
        (pause_id, state, live_seconds),
    ).fetchall()
    return [Holder(str(i), str(r), bool(a)) for i, r, a in rows]


def wait_acknowledged(
    control_dsn: str,
    pause_id: uuid.UUID,
    state: str,
    timeout_s: float,
    on_progress: Callable[[list[Holder]], None] | None = None,
    poll_s: float = 0.2,
) -> list[Holder]:
    """Wait until every live instance acknowledged ``state`` of the pause, or the
    timeout; returns the last view (check ``all(h.acknowledged ...)``)."""
    deadline = time.monotonic() + timeout_s
    last: tuple[tuple[str, bool], ...] | None = None
    with psycopg.connect(control_dsn, autocommit=True) as conn:
        while True:
            seen = holders(conn, pause_id, state)
            view = tuple((h.instance_id, h.acknowledged) for h in seen)
            if on_progress is not None and view != last:
                on_progress(seen)
            last = view
            if all(h.acknowledged for h in seen) or time.monotonic() >= deadline:
                return seen
            time.sleep(poll_s)


def instance_name(role: str) -> str:
    return f"{role}@{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class PauseWatch:
    """A process's view of the open pauses, kept by a background thread.

    ``check`` refuses work on a paused catalog; ``working`` counts work in flight per
    catalog, so a new pause is acknowledged only when the work this process had
    started on the catalog has ended. The thread polls the control database every
    ``poll_seconds`` (the heartbeat too) and wakes early when ``notify`` is called,
    which the process's control-topic listener does on each PAUSE or RESUME
    (``listen`` starts it and returns its stop; ``db.control.control_listener.listener``).
    """

    def __init__(
        self,
        control_dsn: str,
        role: str,
        *,
        poll_seconds: float = 2.0,
        drain_seconds: float = 30.0,
        listen: Callable[[PauseWatch], Callable[[], None]] | None = None,
    ) -> None:
        self.role = role
        self.instance_id = instance_name(role)
        self._dsn = control_dsn
        self._poll = poll_seconds
        self._drain = drain_seconds
        self._lock = threading.Condition()
        self._paused: dict[Key, Pause] = {}
        self._in_flight: dict[Key, int] = {}
        self._acked: set[tuple[uuid.UUID, str]] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listen = listen
        self._stop_listening: Callable[[], None] | None = None

    # -- the process's side -------------------------------------------------------

    def paused(self, tenant_id: str, catalog_id: str) -> Pause | None:
        with self._lock:
            return self._paused.get((tenant_id, catalog_id))

    def paused_keys(self) -> frozenset[Key]:
        with self._lock:
            return frozenset(self._paused)

    def check(self, tenant_id: str, catalog_id: str) -> None:
        pause = self.paused(tenant_id, catalog_id)
        if pause is not None:
            raise _refusal(pause)

    @contextmanager
    def working(self, keys: Iterable[Key]) -> Iterator[None]:
        """Count work on ``keys`` while the block runs; raises ``StreamPaused`` (and
        counts nothing) when one of them is paused."""
        with self._holding(keys, refuse=True):
            yield

    @contextmanager
    def working_on_unpaused(self, keys: Iterable[Key]) -> Iterator[frozenset[Key]]:
        """Count work on those of ``keys`` that are not paused, which the block gets
        (one decision for all: a pause cannot slip between the check and the count)."""
        with self._holding(keys, refuse=False) as held:
            yield held

    @contextmanager
    def _holding(self, keys: Iterable[Key], *, refuse: bool) -> Iterator[frozenset[Key]]:
        wanted = set(keys)
        with self._lock:
            paused = [self._paused[k] for k in sorted(wanted) if k in self._paused]
            if paused and refuse:
                raise _refusal(paused[0])
            held = frozenset(wanted.difference(p.key for p in paused))
            for key in held:
                self._in_flight[key] = self._in_flight.get(key, 0) + 1
        try:
            yield held
        finally:
            with self._lock:
                for key in held:
                    self._in_flight[key] -= 1
                    if not self._in_flight[key]:
                        del self._in_flight[key]
                self._lock.notify_all()

    def notify(self) -> None:
        self._wake.set()

    # -- lifecycle ------------------------------------------------------------------

    def start(self, retry_seconds: float = 1.0) -> PauseWatch:
        """Read the open pauses once (so the process starts knowing them), then keep
        them in the background. A process must not serve without knowing its pauses,
        so while the control database does not answer (restarting, say) the start
        waits for it, logging, rather than exiting: the process recovers on its own
        and is never ready before it knows its pauses."""
        while True:
            try:
                self.refresh()
                break
            except psycopg.OperationalError as exc:
                log.warning("pauses not read yet; waiting for the control database: %s", exc)
                if self._stop.wait(retry_seconds):  # stopped before it ever started
                    return self
        self._thread = threading.Thread(target=self._run, name="pause-watch", daemon=True)
        self._thread.start()
        if self._listen is not None:
            self._stop_listening = self._listen(self)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._stop_listening is not None:
            self._stop_listening()
        if self._thread is not None:
            self._thread.join(10)
        try:  # a clean stop is not waited for (a killed process: after LIVE_SECONDS)
            with psycopg.connect(self._dsn, autocommit=True, connect_timeout=5) as conn:
                conn.execute(
                    "DELETE FROM process_instance WHERE instance_id = %s", (self.instance_id,)
                )
        except psycopg.Error as exc:
            log.warning("instance %s not deregistered: %s", self.instance_id, exc)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._poll)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.refresh()
            except psycopg.Error as exc:  # keep the pauses known; try again next poll
                log.warning("pauses not refreshed: %s", exc)

    def refresh(self) -> None:
        """Read the open pauses, hold them, and acknowledge: a pause once the work
        in flight on its catalog ended (at most ``drain_seconds``, then the next
        refresh tries again), a resume at once."""
        with psycopg.connect(self._dsn, autocommit=True, connect_timeout=5) as conn:
            heartbeat(conn, self.instance_id, self.role)
            current = {p.key: p for p in open_pauses(conn)}
            resumed = recently_resumed(conn, 3600.0)
            with self._lock:
                added = [p for k, p in current.items() if k not in self._paused]
                self._paused = current
                drained = self._lock.wait_for(
                    lambda: not any(self._in_flight.get(p.key) for p in current.values()),
                    timeout=self._drain,
                )
            if added:
                log.info("paused: %s", ", ".join(f"{p.tenant_id}/{p.catalog_id}" for p in added))
            if drained:
                self._ack(conn, list(current.values()), "paused")
            self._ack(conn, resumed, "resumed")

    def _ack(self, conn: psycopg.Connection, pauses: list[Pause], state: str) -> None:
        new = [p.pause_id for p in pauses if (p.pause_id, state) not in self._acked]
        if new:
            acknowledge(conn, new, self.instance_id, self.role, state)
            self._acked.update((p, state) for p in new)


def _refusal(pause: Pause) -> StreamPaused:
    return StreamPaused(
        f"{pause.tenant_id}/{pause.catalog_id} is paused by {pause.paused_by}"
        f" since {pause.paused_at:%Y-%m-%d %H:%M:%S%z} ({pause.reason}): retry after the"
        " resume",
        pause.pause_id,
    )
