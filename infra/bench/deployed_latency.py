"""Phase (f): end-to-end latency through the deployed relay and agents.

Phase (d) runs the relay and the applier inside the bench's process; users run
``gapless relay`` and ``gapless agents``. This phase starts both as subprocesses
pointed at the sandbox (an events topic of its own; the agents without a resolver
API, which the applier does not need), then, at each offered rate of events per
second, ``WRITERS`` writer processes (``infra.bench.client_processes``: each with its
own connection and commit notifier, as a resolver API process has, so that no
interpreter lock sets the rate) commit one-item rule decisions (two events each, so
at half that rate), each on a stream of its own, for ``seconds``, and the phase
waits until every item event has been applied.

An event's latency is its inbox row's ``decided_at`` minus its outbox row's
``committed_at``: the applying transaction's start minus the writing transaction's
start, both on the one PostgreSQL server's clock (the relay and the agents keep no
clock of the bench's). It leaves out the writer's own transaction (about a
millisecond) and the rest of the applying one, so it is the path the pipeline adds:
relay, Kafka, the agents' fetch and the wait for a batch.

Where that time goes is split at the Kafka ``CreateTime`` the relay's producer stamped
on each message (read back from the topic after the run; milliseconds, the host's
wall clock, as PostgreSQL's): ``relay_*`` from the writer's transaction start to the
produce, ``apply_*`` from the produce to the applying transaction's start (broker,
fetch, waiting behind earlier batches). The two parts' p99s need not add up to the
whole's: the slowest events of one part are not those of the other.

And what each rate costs in CPU (``infra.bench.cpu``): microseconds per event of the
writers (the bench process and its writer processes), the relay, the agents and, on
the local services, PostgreSQL (every backend: the writers', the relay's, the
agents') and the Kafka broker, from the first write to the last apply; with the cores
they kept busy over that time. PostgreSQL's is also split by the sandbox's databases
(``postgres.resolver``, ``postgres.product``, ``postgres.control``: the backends
connected to each, ``infra.bench.cpu.DatabaseCpu``), so the writing and the applying
sides' shares show.
That is the budget a rate needs on this machine, whatever the latencies say.

The highest offered rate that the writers reached (at least ``REACHED_SHARE`` of it
committed) with a p99 at or below ``P99_TARGET_MS`` (among those measured) is
reported as ``e2e_deployed_max_rate_eps``; 0 when none did. A rate the writers fell
short of says nothing about that rate: its latencies are those of a lower one (until
2026-12-07 such a rate counted, so 2,000 could be reported at 818 achieved).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import datetime

import psycopg
from confluent_kafka import Consumer, TopicPartition
from psycopg.conninfo import conninfo_to_dict

from infra.bench.client_processes import ClientProcesses
from infra.bench.cpu import CpuMeter, DatabaseCpu, local_service_pids
from infra.bench.latency import percentile
from infra.bench.pipeline import CONSUMER, relay_and_agents
from infra.bench.sandbox import Echo, Sandbox
from infra.bench.writer import process_writer, write_gapless
from schemas.codec import HEADER_EVENT_ID

RATES = (200.0, 1000.0, 2000.0)
"""Offered events per second: one-item decisions (two events each) at half the rate."""
WRITERS = 6
P99_TARGET_MS = 100.0
REACHED_SHARE = 0.95
START_TIMEOUT_S = 90.0
DRAIN_TIMEOUT_S = 120.0


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
    relay_p50_ms: float
    """Writing transaction's start to the Kafka CreateTime."""
    relay_p99_ms: float
    apply_p50_ms: float
    """Kafka CreateTime to the applying transaction's start."""
    apply_p99_ms: float
    cpu_us_per_event: dict[str, float]
    """CPU microseconds per event of each process, first write to last apply."""
    cores: float
    """CPU seconds of all of them over those seconds."""


@dataclass(frozen=True, slots=True)
class _Timed:
    """One event's three instants, as milliseconds since the epoch."""

    committed: float
    produced: float
    applied: float


@dataclass(frozen=True, slots=True)
class DeployedLatency:
    rates: list[RateFigures]

    def at(self, offered: float) -> RateFigures | None:
        return next((r for r in self.rates if r.offered == offered), None)

    @property
    def max_rate(self) -> float:
        good = [
            r.offered
            for r in self.rates
            if r.p99_ms <= P99_TARGET_MS and r.achieved >= REACHED_SHARE * r.offered
        ]
        return max(good, default=0.0)


def _applied(box: Sandbox, event_ids: list[str]) -> dict[str, tuple[datetime, datetime]] | None:
    """Each event's (committed_at, decided_at); None while some is unapplied."""
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
    return {e: (committed[e], applied[e]) for e in event_ids}


def _create_times(box: Sandbox, topic: str, event_ids: set[str]) -> dict[str, float]:
    """The Kafka CreateTime (ms) of each of ``event_ids``, read from the whole topic."""
    consumer = Consumer(
        {
            "bootstrap.servers": box.bootstrap,
            "group.id": f"{box.consumer_group}-create-times",
            "enable.auto.commit": False,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=30)
        partitions = [TopicPartition(topic, p, 0) for p in metadata.topics[topic].partitions]
        ends = {
            tp.partition: consumer.get_watermark_offsets(tp, timeout=30)[1] for tp in partitions
        }
        consumer.assign(partitions)
        pending = {p for p, end in ends.items() if end > 0}
        found: dict[str, float] = {}
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while pending and time.monotonic() < deadline:
            for m in consumer.consume(1000, timeout=1.0):
                partition, offset = m.partition(), m.offset()
                if m.error() is not None or partition is None or offset is None:
                    continue
                if offset + 1 >= ends[partition]:
                    pending.discard(partition)
                event_id = dict(m.headers() or []).get(HEADER_EVENT_ID)
                text = event_id.decode() if isinstance(event_id, bytes) else event_id
                if text in event_ids:
                    found[text] = float(m.timestamp()[1])
        return found
    finally:
        consumer.close()


def _timed(
    applied: dict[str, tuple[datetime, datetime]], produced: dict[str, float]
) -> list[_Timed]:
    missing = set(applied) - set(produced)
    if missing:
        raise RuntimeError(f"{len(missing)} applied events not found on the topic")
    return [
        _Timed(committed.timestamp() * 1000, produced[e], decided.timestamp() * 1000)
        for e, (committed, decided) in applied.items()
    ]


def _figures(
    offered: float, achieved: float, timed: list[_Timed], cpu_us: dict[str, float], cores: float
) -> RateFigures:
    whole = [t.applied - t.committed for t in timed]
    relay = [t.produced - t.committed for t in timed]
    apply = [t.applied - t.produced for t in timed]
    return RateFigures(
        offered=offered,
        achieved=achieved,
        events=len(timed),
        p50_ms=percentile(whole, 50),
        p99_ms=percentile(whole, 99),
        max_ms=max(whole),
        relay_p50_ms=percentile(relay, 50),
        relay_p99_ms=percentile(relay, 99),
        apply_p50_ms=percentile(apply, 50),
        apply_p99_ms=percentile(apply, 99),
        cpu_us_per_event=cpu_us,
        cores=cores,
    )


def write_paced(
    resolver_dsn: str,
    control_dsn: str,
    tenant: str,
    interval: float,
    start: float,
    end: float,
    tag: str,
) -> list[str]:
    """In a client process: one-item decisions on ``tenant`` every ``interval``
    seconds from wall-clock instant ``start`` until ``end``; the item events' ids."""
    w = process_writer(resolver_dsn, control_dsn)
    ids: list[str] = []
    due, n = start, 0
    while due < end:
        pause = due - time.time()
        if pause > 0:
            time.sleep(pause)
        envelopes = write_gapless(w.pool, w.epochs, tenant, [f"{tag}-{n}"], w.notifier)
        ids.append(str(envelopes[-1].event_id))  # the item's
        due += interval
        n += 1
    return ids


def _offer(
    clients: ClientProcesses,
    box: Sandbox,
    tenants: list[str],
    rate: float,
    seconds: float,
    tag: str,
) -> tuple[list[str], float]:
    """Writer processes at ``rate`` decisions/s together for ``seconds``: the item
    events' ids, and the seconds the writing took."""
    interval = len(tenants) / rate
    start = time.time() + 0.2
    dbs = box.databases
    calls = [
        (
            write_paced,
            (
                dbs.resolver_dsn,
                dbs.control_dsn,
                tenant,
                interval,
                start + index * interval / len(tenants),
                start + seconds,
                tag,
            ),
        )
        for index, tenant in enumerate(tenants)
    ]
    ids = [event_id for written in clients.run(calls) for event_id in written]
    return ids, time.time() - start


def _database_cpu(box: Sandbox) -> DatabaseCpu:
    """PostgreSQL's CPU split by the sandbox's databases: the resolver's (the writers'
    decisions and notifications, the relay's reads and position moves) and the
    product's (the agents' batches)."""
    dbs = box.databases
    names = {
        name: str(conninfo_to_dict(dsn)["dbname"])
        for name, dsn in (
            ("resolver", dbs.resolver_dsn),
            ("product", dbs.product_dsn),
            ("control", dbs.control_dsn),
        )
    }
    return DatabaseCpu(dbs.resolver_dsn, names)


def measure_deployed_latency(box: Sandbox, seconds: float, echo: Echo) -> DeployedLatency:
    topic = box.topic("deployed")
    processes = relay_and_agents(box, topic, "deployed")
    tenants = [box.tenant(f"d{i}") for i in range(WRITERS)]
    clients = ClientProcesses(WRITERS)
    figures: list[RateFigures] = []
    try:
        for p in processes:
            p.start()
        for p in processes:
            p.wait_ready(START_TIMEOUT_S)
        services = local_service_pids()
        meter = CpuMeter({"writers": os.getpid(), **{p.name: p.pid for p in processes}, **services})
        by_database = _database_cpu(box) if "postgres" in services else None

        def drained(ids: list[str], timeout: float) -> dict[str, tuple[datetime, datetime]]:
            deadline = time.monotonic() + timeout
            while (found := _applied(box, ids)) is None:
                for p in processes:
                    p.require_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"events not applied {timeout:.0f}s after writing")
                time.sleep(0.2)
            return found

        warm, _ = _offer(clients, box, tenants, 20.0, 1.0, "warm")
        drained(warm, START_TIMEOUT_S)
        for rate in RATES:
            echo(
                f"deployed: {rate:.0f} events/s offered ({rate / 2:.0f} decisions/s)"
                f" for {seconds:g}s"
            )
            cpu_before, clock = meter.sample(), time.monotonic()
            # The databases' samples inside the whole's: their parts never exceed it.
            db_before = by_database.sample() if by_database else {}
            ids, took = _offer(clients, box, tenants, rate / 2, seconds, f"r{rate:.0f}")
            applied = drained(ids, DRAIN_TIMEOUT_S)
            db_after = by_database.sample() if by_database else {}
            cpu_after, elapsed = meter.sample(), time.monotonic() - clock
            cpu_us = CpuMeter.per_event_us(cpu_before, cpu_after, 2 * len(ids))
            parts = DatabaseCpu.per_event_us(db_before, db_after, 2 * len(ids))
            cpu_us.update((f"postgres.{name}", us) for name, us in sorted(parts.items()))
            cores = sum(cpu_after[n] - cpu_before[n] for n in cpu_before) / elapsed
            timed = _timed(applied, _create_times(box, topic, set(ids)))
            figures.append(_figures(rate, 2 * len(ids) / took, timed, cpu_us, cores))
            f = figures[-1]
            echo(
                f"deployed: {f.achieved:.0f}/s achieved, p50 {f.p50_ms:.1f} ms,"
                f" p99 {f.p99_ms:.1f} ms, max {f.max_ms:.1f} ms; commit->produce p50"
                f" {f.relay_p50_ms:.1f} / p99 {f.relay_p99_ms:.1f} ms, produce->apply p50"
                f" {f.apply_p50_ms:.1f} / p99 {f.apply_p99_ms:.1f} ms; CPU per event "
                + ", ".join(f"{n} {us:.0f} µs" for n, us in f.cpu_us_per_event.items())
                + f" ({f.cores:.2f} cores)"
            )
    finally:
        for p in reversed(processes):
            p.stop()
        clients.close()
    return DeployedLatency(figures)
