"""``gapless bench``: each part of the pipeline against a baseline without its guarantees.

Phases, in the order they run (each bounded by ``seconds``):
a. writer: ``record_decision`` with the cursor vs with a sequence-numbered outbox, 8 threads;
b. relay: ``Relay.run_once`` vs a bare producer with the same bytes;
c. applier: ``Applier.apply`` vs a bare batched upsert;
d. end to end: writer COMMIT to projection COMMIT at a fixed offered load;
e. the deployed agents (``gapless agents``, a subprocess) catching up a backlog of
   ``backlog`` events, against phase (c)'s rates;
f. end to end through the deployed relay and agents at 200, 1,000 and 2,000
   events/s offered (``infra.bench.deployed_latency``);
g. the deployed capture worker (``gapless resolver-worker``) settling one json-feed
   capture of ``worker_products`` products posted through the resolver API's intake
   (``infra.bench.capture_worker``);
h. the deployed resolver API (``gapless resolver-api``): decisions over HTTP beside
   the same decisions in process, and captures posted (``infra.bench.resolver_api``).
Before (e), (f) and (h) the sandbox's databases are vacuumed, checkpointed and left
until no autovacuum worker is busy in them (``infra.bench.settle``), so that neither
phase pays for what the ones before it wrote. Absolute figures depend on the machine;
the ratios, taken within one run, are what to compare between changes.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from infra.bench.agents import measure_agents
from infra.bench.applier import measure_applier
from infra.bench.capture_worker import EVENTS, PRODUCTS, measure_capture_worker
from infra.bench.decision_cpu import measure_decision_cpu
from infra.bench.deployed_latency import measure_deployed_latency
from infra.bench.latency import measure_latency
from infra.bench.machine import MachineLoad
from infra.bench.relay import measure_relay
from infra.bench.report import (
    Figures,
    api_figures,
    render_api,
    render_table,
    render_worker,
    worker_figures,
)
from infra.bench.resolver_api import measure_resolver_api
from infra.bench.sandbox import PARTITIONS, Sandbox, sandbox
from infra.bench.settle import settle_sandbox
from infra.bench.writer import THREADS, measure_writer

T = TypeVar("T")

BACKLOG = 100_000
"""Events the deployed agents catch up in phase (e)."""
WORKER_TOPICS = {"jobs": 1, EVENTS: PARTITIONS, "control": 1, "status": 1}
"""Phase (g)'s topics: the API's jobs, and its relay's and agents' events, control and
rebuild status."""
E2E_RATE = 200.0
"""Offered load of phase (d), decisions (each creating one item: two events) per second:
well below every phase's capacity."""


def environment_of(box: Sandbox) -> dict[str, object]:
    """What the figures were measured on, and one round trip's cost."""
    with psycopg.connect(box.databases.resolver_dsn, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        sync = conn.execute("SHOW synchronous_commit").fetchone()
        trips = []
        for _ in range(300):
            start = time.perf_counter()
            conn.execute("SELECT 1")
            trips.append(time.perf_counter() - start)
    return {
        "cores": os.cpu_count(),
        "postgres": version[0] if version else "?",
        "synchronous_commit": sync[0] if sync else "?",
        "pg_round_trip_us": round(statistics.median(trips) * 1e6, 1),
    }


def run_bench(
    seconds: float,
    as_json: bool,
    echo: Callable[[str], None],
    backlog: int = BACKLOG,
    worker_products: int = PRODUCTS,
) -> None:
    """Prepare the local services, run every phase in a sandbox, print the figures."""
    from infra.config import use_local_services
    from infra.provision import provision

    use_local_services()
    provision(echo)
    machine = MachineLoad()
    topics = {**WORKER_TOPICS, "agents": 6, "deployed": 6}
    with sandbox(echo, extra_topics=topics) as box:
        environment = environment_of(box)
        pool = ConnectionPool(
            box.databases.resolver_dsn, min_size=THREADS, max_size=THREADS, open=True
        )
        epochs = EpochSource(box.databases.control_dsn)
        try:
            pool.wait()
            writer = measure_writer(box, pool, epochs, seconds, echo)
            decision = measure_decision_cpu(box, epochs, seconds, echo)
            relay = measure_relay(box, pool, epochs, seconds, echo)
            applier = measure_applier(box, seconds, echo)
            latency = measure_latency(box, pool, epochs, seconds, E2E_RATE, echo)
            settle_sandbox(box, echo)  # what phases (a)-(d) left, not theirs to pay
            agents = measure_agents(box, backlog, echo)
            settle_sandbox(box, echo)  # nor the backlog's, for phase (f)
            deployed = measure_deployed_latency(box, seconds, echo)
            worker = measure_capture_worker(box, worker_products, echo)
            settle_sandbox(box, echo)  # nor the capture's, for phase (h)
            api = measure_resolver_api(box, seconds, echo)
        finally:
            pool.close()
            epochs.close()
    environment.update(machine.finish())
    figures = Figures(
        seconds,
        environment,
        writer,
        relay,
        applier,
        latency,
        agents,
        deployed,
        worker,
        decision,
        api,
    )
    if as_json:
        print(json.dumps(figures.as_dict()))
    else:
        print(render_table(figures))


def run_alone(
    topics: dict[str, int],
    measure: Callable[[Sandbox], T],
    keys: Callable[[T], dict[str, object]],
    render: Callable[[T], str],
    as_json: bool,
    echo: Callable[[str], None],
    kafka_bootstrap: str | None = None,
) -> None:
    """One phase alone, in a sandbox of its own with ``topics``, with the machine's
    load and the environment. ``kafka_bootstrap``: the sandbox's topics (and its
    processes') on that cluster, three replicas each, instead of the local broker."""
    from infra.config import use_local_services
    from infra.provision import provision

    use_local_services()
    provision(echo)
    if kafka_bootstrap is not None:
        os.environ["GAPLESS_KAFKA_BOOTSTRAP"] = kafka_bootstrap
        os.environ["GAPLESS_KAFKA_REPLICATION_FACTOR"] = "3"
    machine = MachineLoad()
    with sandbox(echo, extra_topics=topics) as box:
        environment = environment_of(box)
        figures = measure(box)
    environment.update(machine.finish())
    if as_json:
        print(json.dumps({**environment, **keys(figures)}))
    else:
        print(render(figures))
        print(", ".join(f"{k} {v}" for k, v in environment.items()))


def run_worker_bench(products: int, as_json: bool, echo: Callable[[str], None]) -> None:
    """Phase (g) alone: the deployed capture worker settling one capture."""
    run_alone(
        WORKER_TOPICS,
        lambda box: measure_capture_worker(box, products, echo),
        worker_figures,
        render_worker,
        as_json,
        echo,
    )


def run_api_bench(seconds: float, as_json: bool, echo: Callable[[str], None]) -> None:
    """Phase (h) alone: the deployed resolver API."""
    run_alone(
        {"jobs": 1},
        lambda box: measure_resolver_api(box, seconds, echo),
        api_figures,
        render_api,
        as_json,
        echo,
    )
