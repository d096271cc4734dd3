"""What one one-item decision costs in CPU: the client's and PostgreSQL's.

One thread on one connection records one-item rule decisions (``writer.decision``:
a new item, two events) through ``record_decision`` with the commit notifier, as the
resolver API does, after a warm-up. The client's CPU is that thread's own
(``time.thread_time``: psycopg, the domain code and the codec all run in it);
PostgreSQL's is the user and system time, from ``/proc``, of every client backend
connected to the sandbox's resolver database (the decisions' and the notifier's),
read before and after; an autovacuum worker there is not the decisions' and, gone
before the second read, would void the figure (it did, until 2026-12-07). On a server whose
processes this machine cannot see, the backends' figure is absent.

Two ways in alternation, ``ROUNDS`` rounds each of ``seconds / ROUNDS``, each on a
tenant of its own: as the resolver API records a decision (its reads without the
cursor lock, ``UnitOfWork.unlocked_first``; the thread being its stream's one
writer, the cursor is where its previous commit left it and the new item is
presumed absent, ``db.unlocked.known_cursors``: the joined write alone), and, the
baseline, always under the lock (``unlocked_reads=False``), as every decision was
recorded until 2026-12-07.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.resolver.commit_notifier import CommitNotifier
from infra.bench.cpu import process_seconds
from infra.bench.sandbox import Echo, Sandbox
from infra.bench.writer import write_gapless

WARMUP = 50
"""Decisions before the clock starts (cursor row, epoch, prepared statements)."""
ROUNDS = 3


@dataclass(frozen=True, slots=True)
class DecisionCpu:
    decisions: int
    wall_us: float
    client_us: float
    backend_us: float | None
    locked: DecisionCpu | None = None
    """The baseline: the same decisions always under the cursor lock."""


def _backends(dsn: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        ).fetchall()
    return [int(r[0]) for r in rows]


def _backend_seconds(pids: list[int]) -> float | None:
    seconds = [process_seconds(pid) for pid in pids]
    if not pids or any(s is None for s in seconds):
        return None
    return sum(s for s in seconds if s is not None)


@dataclass
class _Tally:
    decisions: int = 0
    wall: float = 0.0
    client: float = 0.0
    backend: float | None = 0.0

    def figures(self, locked: DecisionCpu | None = None) -> DecisionCpu:
        n = max(self.decisions, 1)
        backend = None if self.backend is None else self.backend / n * 1e6
        return DecisionCpu(
            self.decisions, self.wall / n * 1e6, self.client / n * 1e6, backend, locked
        )


def measure_decision_cpu(
    box: Sandbox, epochs: EpochSource, seconds: float, echo: Echo
) -> DecisionCpu:
    """The figures above, on tenants of the sandbox's own."""
    dsn = box.databases.resolver_dsn
    pool = ConnectionPool(dsn, min_size=1, max_size=1, open=True)
    notifier = CommitNotifier(dsn, "bench-decision-notifier").start()
    ways = {"unlocked": _Tally(), "locked": _Tally()}
    tenants = {way: box.tenant(f"decision-cpu-{way}") for way in ways}
    try:
        for way, tenant in tenants.items():
            for n in range(WARMUP):
                write_gapless(pool, epochs, tenant, [f"warm-{n}"], notifier, way == "unlocked")
        echo(f"decision CPU: one-item decisions from one thread for {seconds:.1f}s a way")
        pids = _backends(dsn)
        for round_ in range(ROUNDS):
            for way, tally in ways.items():
                _round(pool, epochs, notifier, tenants[way], way, round_, pids, tally, seconds)
    finally:
        notifier.close()
        pool.close()
    return ways["unlocked"].figures(ways["locked"].figures())


def _round(
    pool: ConnectionPool,
    epochs: EpochSource,
    notifier: CommitNotifier,
    tenant: str,
    way: str,
    round_: int,
    pids: list[int],
    tally: _Tally,
    seconds: float,
) -> None:
    """One round of one way's decisions, added to its tally."""
    backend_before = _backend_seconds(pids)
    wall, client = time.perf_counter(), time.thread_time()
    done = 0
    while time.perf_counter() - wall < seconds / ROUNDS:
        write_gapless(pool, epochs, tenant, [f"r{round_}-{done}"], notifier, way == "unlocked")
        done += 1
    tally.wall += time.perf_counter() - wall
    tally.client += time.thread_time() - client
    tally.decisions += done
    backend_after = _backend_seconds(pids)
    if tally.backend is None or backend_before is None or backend_after is None:
        tally.backend = None
    else:
        tally.backend += backend_after - backend_before
