"""What one one-item decision costs in CPU: the client's and PostgreSQL's.

One thread on one connection records one-item rule decisions (``writer.decision``:
a new item, two events) through ``record_decision`` with the commit notifier, as the
resolver API does, for ``seconds`` after a warm-up. The client's CPU is that
thread's own (``time.thread_time``: psycopg, the domain code and the codec all run
in it); PostgreSQL's is the user and system time, from ``/proc``, of every backend
connected to the sandbox's resolver database (the decisions' and the notifier's),
read before and after. On a server whose processes this machine cannot see, the
backends' figure is absent.
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


@dataclass(frozen=True, slots=True)
class DecisionCpu:
    decisions: int
    wall_us: float
    client_us: float
    backend_us: float | None


def _backends(dsn: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        ).fetchall()
    return [int(r[0]) for r in rows]


def _backend_seconds(pids: list[int]) -> float | None:
    seconds = [process_seconds(pid) for pid in pids]
    if not pids or any(s is None for s in seconds):
        return None
    return sum(s for s in seconds if s is not None)


def measure_decision_cpu(
    box: Sandbox, epochs: EpochSource, seconds: float, echo: Echo
) -> DecisionCpu:
    """The figures above, on a tenant of the sandbox's own."""
    dsn = box.databases.resolver_dsn
    tenant = box.tenant("decision-cpu")
    pool = ConnectionPool(dsn, min_size=1, max_size=1, open=True)
    notifier = CommitNotifier(dsn, "bench-decision-notifier").start()
    try:
        for n in range(WARMUP):
            write_gapless(pool, epochs, tenant, [f"warm-{n}"], notifier)
        echo(f"decision CPU: one-item decisions from one thread for {seconds:.1f}s")
        pids = _backends(dsn)
        backend_before = _backend_seconds(pids)
        wall, client = time.perf_counter(), time.thread_time()
        done = 0
        while time.perf_counter() - wall < seconds:
            write_gapless(pool, epochs, tenant, [f"item-{done}"], notifier)
            done += 1
        wall, client = time.perf_counter() - wall, time.thread_time() - client
        backend_after = _backend_seconds(pids)
    finally:
        notifier.close()
        pool.close()
    backend = (
        None
        if backend_before is None or backend_after is None
        else (backend_after - backend_before) / done * 1e6
    )
    return DecisionCpu(done, wall / done * 1e6, client / done * 1e6, backend)
