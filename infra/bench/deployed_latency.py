"""Phase (f): end-to-end latency through the deployed relay and agents.

Phase (d) runs the relay and the applier inside the bench's process; users run
``gapless relay`` and ``gapless agents``. This phase starts both as subprocesses
pointed at the sandbox (an events topic of its own; the agents without a resolver
API, which the applier does not need), then, at each offered rate of events per
second, writer threads in this process commit one-item rule decisions (two events
each, so at half that rate) over ``WRITERS`` streams for ``seconds``, and the phase
waits until every item event has been applied.

An event's latency is its inbox row's ``decided_at`` minus its outbox row's
``committed_at``: the applying transaction's start minus the writing transaction's
start, both on the one PostgreSQL server's clock (the relay and the agents keep no
clock of the bench's). It leaves out the writer's own transaction (about a
millisecond) and the rest of the applying one, so it is the path the pipeline adds:
relay, Kafka, the agents' fetch and the wait for a batch.

The highest offered rate whose p99 stayed at or below ``P99_TARGET_MS`` (among those
measured) is reported as ``e2e_deployed_max_rate_eps``; 0 when none did.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psycopg
from psycopg_pool import ConnectionPool

from db.commit_notifier import CommitNotifier
from db.epochs import EpochSource
from infra.bench.latency import percentile
from infra.bench.sandbox import Echo, Sandbox, deployed_env
from infra.bench.writer import write_gapless
from infra.processes import Deployed, free_port

RATES = (200.0, 1000.0, 2000.0)
"""Offered events per second: one-item decisions (two events each) at half the rate."""
WRITERS = 6
P99_TARGET_MS = 100.0
START_TIMEOUT_S = 90.0
DRAIN_TIMEOUT_S = 120.0
CONSUMER = "product-applier"


@dataclass(frozen=True, slots=True)
class RateFigures:
    offered: float
    """Events per second offered (decisions at half the rate)."""
    achieved: float
    """Events per second the writers committed."""
    events: int
    """Item events timed."""
    p50_ms: float
    p99_ms: float
    max_ms: float


@dataclass(frozen=True, slots=True)
class DeployedLatency:
    rates: list[RateFigures]

    def at(self, offered: float) -> RateFigures | None:
        return next((r for r in self.rates if r.offered == offered), None)

    @property
    def max_rate(self) -> float:
        good = [r.offered for r in self.rates if r.p99_ms <= P99_TARGET_MS]
        return max(good, default=0.0)


def _processes(box: Sandbox, topic: str, logs: Path) -> list[Deployed]:
    env = deployed_env(box, topic)
    relay_port, web_port = free_port(), free_port()
    relay = Deployed(
        "relay",
        ["relay"],
        {**env, "GAPLESS_RELAY_HTTP_PORT": str(relay_port)},
        logs / f"bench-{box.run_id}-deployed-relay.log",
        f"http://127.0.0.1:{relay_port}/readyz",
    )
    agents = Deployed(
        "agents",
        ["agents"],
        {
            **env,
            "GAPLESS_AGENTS_WEB_PORT": str(web_port),
            "GAPLESS_AGENTS_APP_ID": f"{box.consumer_group}-deployed",
            "GAPLESS_AGENTS_CONSUMER": CONSUMER,
            "GAPLESS_RESOLVER_URL": f"http://127.0.0.1:{free_port()}",  # none: see above
        },
        logs / f"bench-{box.run_id}-deployed-agents.log",
        f"http://127.0.0.1:{web_port}/readyz",
    )
    return [relay, agents]


def _latencies(box: Sandbox, event_ids: list[str]) -> list[float] | None:
    """Milliseconds from each event's write to its apply; None while some is unapplied."""
    with psycopg.connect(box.databases.product_dsn, autocommit=True) as conn:
        applied: dict[str, datetime] = dict(
            conn.execute(
                "SELECT event_id::text, decided_at FROM inbox WHERE consumer = %s"
                " AND event_id = ANY(%s::uuid[])",
                (CONSUMER, event_ids),
            ).fetchall()
        )
    if len(applied) < len(event_ids):
        return None
    with psycopg.connect(box.databases.resolver_dsn, autocommit=True) as conn:
        committed: dict[str, datetime] = dict(
            conn.execute(
                "SELECT event_id::text, committed_at FROM outbox WHERE event_id = ANY(%s::uuid[])",
                (event_ids,),
            ).fetchall()
        )
    return [(applied[e] - committed[e]).total_seconds() * 1000 for e in event_ids]


def _offer(
    pool: ConnectionPool,
    epochs: EpochSource,
    notifier: CommitNotifier,
    tenants: list[str],
    rate: float,
    seconds: float,
    tag: str,
) -> tuple[list[str], float]:
    """Writers at ``rate`` decisions/s for ``seconds``: the item events' ids, and the
    seconds the writing took."""
    ids: list[str] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    interval = len(tenants) / rate
    start = time.monotonic() + 0.05
    end = start + seconds

    def writer(index: int) -> None:
        due = start + index * interval / len(tenants)
        n = 0
        try:
            while due < end:
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                envelopes = write_gapless(pool, epochs, tenants[index], [f"{tag}-{n}"], notifier)
                with lock:
                    ids.append(str(envelopes[-1].event_id))  # the item's
                due += interval
                n += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(len(tenants))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return ids, time.monotonic() - start


def measure_deployed_latency(box: Sandbox, seconds: float, echo: Echo) -> DeployedLatency:
    logs = Path(os.environ.get("GAPLESS_LOCAL_DIR", Path.cwd() / ".local")) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    processes = _processes(box, box.topic("deployed"), logs)
    tenants = [box.tenant(f"d{i}") for i in range(WRITERS)]
    pool = ConnectionPool(box.databases.resolver_dsn, min_size=WRITERS, max_size=WRITERS)
    epochs = EpochSource(box.databases.control_dsn)
    # The writers wake the relay after COMMIT, as the resolver API's do.
    notifier = CommitNotifier(box.databases.resolver_dsn, "bench-deployed-notifier").start()
    figures: list[RateFigures] = []
    try:
        for p in processes:
            p.start()
        for p in processes:
            p.wait_ready(START_TIMEOUT_S)
        pool.wait()

        def drained(ids: list[str], timeout: float) -> list[float]:
            deadline = time.monotonic() + timeout
            while (found := _latencies(box, ids)) is None:
                for p in processes:
                    p.require_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"events not applied {timeout:.0f}s after writing")
                time.sleep(0.2)
            return found

        warm, _ = _offer(pool, epochs, notifier, tenants, 20.0, 1.0, "warm")
        drained(warm, START_TIMEOUT_S)
        for rate in RATES:
            echo(
                f"deployed: {rate:.0f} events/s offered ({rate / 2:.0f} decisions/s)"
                f" for {seconds:g}s"
            )
            ids, took = _offer(pool, epochs, notifier, tenants, rate / 2, seconds, f"r{rate:.0f}")
            latencies = drained(ids, DRAIN_TIMEOUT_S)
            figures.append(
                RateFigures(
                    offered=rate,
                    achieved=2 * len(ids) / took,
                    events=len(ids),
                    p50_ms=percentile(latencies, 50),
                    p99_ms=percentile(latencies, 99),
                    max_ms=max(latencies),
                )
            )
            f = figures[-1]
            echo(
                f"deployed: {f.achieved:.0f}/s achieved, p50 {f.p50_ms:.1f} ms,"
                f" p99 {f.p99_ms:.1f} ms, max {f.max_ms:.1f} ms"
            )
    finally:
        for p in reversed(processes):
            p.stop()
        pool.close()
        epochs.close()
        notifier.close()
    return DeployedLatency(figures)
