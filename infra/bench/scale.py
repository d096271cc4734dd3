"""``gapless bench scale``: the relay and the agents scaled out on three brokers.

On a private three-node Kafka cluster (``infra.chaos.cluster``; topics with three
replicas, two in sync, every write ``acks=all``) and the sandbox's databases:

- agents rounds, with 1, 2 and 3 ``gapless agents`` workers of one consumer group:
  the workers start on an empty topic of 6 partitions and settle their assignment
  (each reports partitions in ``gapless_agents_assigned_partitions``); then ``events``
  encoded events over 12 streams of the round's own tenants go onto the topic at once,
  and the rate is the events over the time from their first apply to their last
  (``inbox.decided_at``, one server clock) [``scale_agents_eps_<n>``];
- relay rounds, with 1 and 2 ``gapless relay`` processes: ``events`` outbox rows over
  12 streams of the round's own tenants are seeded first, then the relays start on a
  topic of their own and the rate is the events over the time from the first row seen
  published (``stream_publication``, polled every 20 ms) to the last
  [``scale_relay_eps_<n>``].

Each round also reports the CPU per event of each process (``/proc``, the trees'
user and system time): every worker or relay, the local PostgreSQL (all its
backends) and each Kafka node [``scale_<kind>_<n>_cpu_us``: name → µs].
On two cores the curve flattens once the processes, PostgreSQL and the brokers
together use both: the CPU per event says what a bigger machine would need.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from db.control.epochs import ensure_epoch
from infra.bench.agents import CONSUMER, applied, publish_messages
from infra.bench.applier import CATALOG, MessageSource
from infra.bench.cpu import CpuMeter, local_service_pids
from infra.bench.outbox_seed import seed
from infra.bench.pipeline import logs_dir
from infra.bench.sandbox import Sandbox, deployed_env
from infra.local import kafka
from infra.local.kafka_nodes import nodes
from infra.local.layout import Layout
from infra.processes import Deployed, free_port, gauge

Echo = Callable[[str], None]

AGENTS = (1, 2, 3)
RELAYS = (1, 2)
PARTITIONS = 6
STREAMS = 12
ASSIGNED = "gapless_agents_assigned_partitions"
START_TIMEOUT_S = 120.0
POLL_S = 0.02


@dataclass(frozen=True, slots=True)
class Round:
    kind: str
    """``agents`` or ``relay``."""
    processes: int
    events: int
    seconds: float
    cpu_us: dict[str, float]
    """CPU per event of each process of the round, PostgreSQL and each Kafka node."""

    @property
    def eps(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


@dataclass
class ScaleFigures:
    rounds: list[Round] = field(default_factory=list)

    def keys(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for r in self.rounds:
            out[f"scale_{r.kind}_eps_{r.processes}"] = round(r.eps, 1)
            out[f"scale_{r.kind}_{r.processes}_cpu_us"] = {
                k: round(v, 1) for k, v in r.cpu_us.items()
            }
        return out


def _topic(box: Sandbox, name: str) -> str:
    """A topic of the round on the cluster: 6 partitions, 3 replicas, 2 in sync."""
    topic = box.topic(name)
    admin = AdminClient({"bootstrap.servers": box.bootstrap})
    new = NewTopic(topic, PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
    admin.create_topics([new])[topic].result(timeout=30)
    return topic


def _meter(cluster: Layout, processes: dict[str, int]) -> CpuMeter:
    pids = dict(processes)
    found = local_service_pids()
    if "postgres" in found:
        pids["postgres"] = found["postgres"]
    for node in nodes(cluster):
        pid = kafka.node_pid(cluster, node)
        if pid is not None:
            pids[node.name] = pid
    return CpuMeter(pids)


def _agents(box: Sandbox, topic: str, n: int, group: str) -> list[Deployed]:
    env = deployed_env(box, topic)
    workers = []
    for i in range(1, n + 1):
        port = free_port()
        workers.append(
            Deployed(
                f"agents-{i}",
                ["agents"],
                {
                    **env,
                    "GAPLESS_AGENTS_WEB_PORT": str(port),
                    "GAPLESS_AGENTS_APP_ID": group,
                    "GAPLESS_AGENTS_CONSUMER": CONSUMER,
                    "GAPLESS_RESOLVER_URL": f"http://127.0.0.1:{free_port()}",
                },
                logs_dir() / f"bench-{box.run_id}-{group}-{i}.log",
                f"http://127.0.0.1:{port}/readyz",
            )
        )
    return workers


def _metrics(process: Deployed) -> str | None:
    return process.health_url.replace("/readyz", "/metrics") if process.health_url else None


def _wait(done: Callable[[], bool], processes: list[Deployed], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        for p in processes:
            p.require_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"scale: {what} not reached in {timeout:.0f}s")
        time.sleep(POLL_S)


def agents_round(box: Sandbox, cluster: Layout, n: int, events: int, echo: Echo) -> Round:
    """``n`` workers (0: the warm-up, one worker on topics and tenants of its own)."""
    topic = _topic(box, f"scale-agents-{n}")
    workers = _agents(box, topic, max(n, 1), f"{box.consumer_group}-scale-{n}")
    source = MessageSource(box, f"a{n}-")
    with psycopg.connect(box.databases.control_dsn, autocommit=True) as control:
        for tenant in source.tenants:
            ensure_epoch(control, tenant, CATALOG)
    try:
        for w in workers:
            w.start()
        for w in workers:
            w.wait_ready(START_TIMEOUT_S)
        _wait(
            lambda: all(gauge(_metrics(w), ASSIGNED) > 0 for w in workers),
            workers,
            f"{n} workers each assigned partitions",
            START_TIMEOUT_S,
        )
        meter = _meter(cluster, {w.name: w.pid for w in workers})
        before = meter.sample()
        publish_messages(box.bootstrap, topic, source, events)
        product = box.databases.product_dsn
        _wait(
            lambda: applied(product, source.tenants)[0] >= events,
            workers,
            f"{events:,} events applied by {n} workers",
            START_TIMEOUT_S + events / 200,
        )
        after = meter.sample()
        seconds = applied(product, source.tenants)[1]
    finally:
        for w in workers:
            w.stop()
    found = Round("agents", n, events, seconds, CpuMeter.per_event_us(before, after, events))
    what = f"{n} agents worker(s)" if n else "warm-up"
    echo(f"scale: {what}: {found.eps:,.0f} events/s")
    return found


def _published(resolver_dsn: str, tenants: list[str]) -> int:
    with psycopg.connect(resolver_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(published_position), 0) FROM stream_publication"
            " WHERE tenant_id = ANY(%s)",
            (tenants,),
        ).fetchone()
    return int(row[0]) if row is not None else 0


def relay_round(box: Sandbox, cluster: Layout, n: int, events: int, echo: Echo) -> Round:
    topic = _topic(box, f"scale-relay-{n}")
    tenants = [box.tenant(f"r{n}-{s}") for s in range(STREAMS)]
    seed(box.databases, tenants, CATALOG, events, lambda _line: None)
    env = deployed_env(box, topic)
    relays = []
    for i in range(1, n + 1):
        port = free_port()
        relays.append(
            Deployed(
                f"relay-{i}",
                ["relay"],
                {**env, "GAPLESS_RELAY_HTTP_PORT": str(port)},
                logs_dir() / f"bench-{box.run_id}-scale-relay-{n}-{i}.log",
                f"http://127.0.0.1:{port}/readyz",
            )
        )
    resolver = box.databases.resolver_dsn
    try:
        for r in relays:
            r.start()
        _wait(lambda: all(r.alive() for r in relays), relays, "relays started", 10)
        meter = _meter(cluster, {r.name: r.pid for r in relays})
        before = meter.sample()
        _wait(lambda: _published(resolver, tenants) > 0, relays, "a first row", START_TIMEOUT_S)
        began, first = time.monotonic(), _published(resolver, tenants)
        _wait(
            lambda: _published(resolver, tenants) >= events,
            relays,
            f"{events:,} rows published by {n} relay(s)",
            START_TIMEOUT_S + events / 500,
        )
        seconds = time.monotonic() - began
        after = meter.sample()
    finally:
        for r in relays:
            r.stop()
    # The rate counts the rows published after the first was seen, over the time since.
    if first >= events:
        raise RuntimeError(f"the relay published all {events:,} rows at once: give more --events")
    cpu = CpuMeter.per_event_us(before, after, events)
    found = Round("relay", n, events - first, seconds, cpu)
    echo(f"scale: {n} relay(s): {found.eps:,.0f} events/s")
    return found


def measure_scale(box: Sandbox, cluster: Layout, events: int, echo: Echo) -> ScaleFigures:
    """Every round above, agents first, after an unreported warm-up round: the
    brokers of a cluster just started spend their first seconds compiling (their JIT),
    which would be charged to the first round."""
    echo("scale: warming the cluster up (one agents worker, not reported)")
    agents_round(box, cluster, 0, events // 5, echo)
    figures = ScaleFigures()
    for n in AGENTS:
        figures.rounds.append(agents_round(box, cluster, n, events, echo))
    for n in RELAYS:
        figures.rounds.append(relay_round(box, cluster, n, events, echo))
    return figures


def render_scale(figures: ScaleFigures) -> str:
    lines = ["round                 events/s   CPU µs per event"]
    for r in figures.rounds:
        cpu = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(r.cpu_us.items()))
        lines.append(f"{r.processes} {r.kind:<18} {r.eps:>9,.0f}   {cpu}")
    return "\n".join(lines)


def run_scale_bench(events: int, as_json: bool, echo: Echo) -> None:
    """Every round on a private three-node cluster, started and removed here."""
    from infra.bench.run import run_alone
    from infra.chaos.cluster import kafka_cluster
    from infra.chaos.services import port_base

    with kafka_cluster(echo, port_base(), "bench-cluster") as cluster:
        run_alone(
            {"control": 1, "status": 1},
            lambda box: measure_scale(box, cluster, events, echo),
            ScaleFigures.keys,
            render_scale,
            as_json,
            echo,
            kafka_bootstrap=kafka.bootstrap(cluster),
        )
