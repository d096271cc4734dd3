"""``gapless bench memory``: the deployed relay's and agents' memory over a large backlog.

In a sandbox of its own (databases and topics, dropped afterwards):

1. seed ``events`` committed, unpublished events over ``STREAMS`` streams into the
   outbox, set-based (``infra.bench.outbox_seed``);
2. start ``gapless relay`` pointed at the sandbox and follow it until every event
   is on the sandbox's events topic (the streams' published positions), sampling
   its resident memory every ``SAMPLE_S``; stop it;
3. start ``gapless agents`` on that topic (as phase (e) does) and follow them until
   every event is applied (the streams' durable progress), sampling likewise;
4. for each: the RSS when it answered its health check, at 10 %, 50 % and 100 % of
   the backlog (the first sample at or past each), the peak (``VmHWM`` and the
   samples), and whether it stayed flat: RSS at 100 % within ``FLAT_WITHIN`` of the
   RSS at 10 % (by then start-up and the first batches have allocated what a
   steady state needs; what grows after that grows with the backlog).

Memory is the process and its children (``infra.bench.memory``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import psycopg

from infra.bench.machine import MachineLoad
from infra.bench.memory import peak_rss_mb, rss_mb
from infra.bench.memory_report import ProcessMemory, Sample, render_memory_table
from infra.bench.outbox_seed import seed
from infra.bench.pipeline import CONSUMER, relay_and_agents
from infra.bench.run import environment_of
from infra.bench.sandbox import Echo, Sandbox, sandbox
from infra.processes import Deployed

EVENTS = 1_000_000
STREAMS = 8
CATALOG = "catalog1"
SAMPLE_S = 1.0
ECHO_EVERY_S = 10.0
START_TIMEOUT_S = 90.0


def _published(conn: psycopg.Connection, tenants: list[str]) -> int:
    row = conn.execute(
        "SELECT coalesce(sum(published_position), 0)::bigint FROM stream_publication"
        " WHERE tenant_id = ANY(%s)",
        (tenants,),
    ).fetchone()
    return int(row[0]) if row else 0


def _applied(conn: psycopg.Connection, tenants: list[str]) -> int:
    """Events applied: positions start at 1 and progress is contiguous, so a
    stream's durable position is the number of its events applied."""
    row = conn.execute(
        "SELECT coalesce(sum(position), 0)::bigint FROM stream_progress"
        " WHERE consumer = %s AND tenant_id = ANY(%s)",
        (CONSUMER, tenants),
    ).fetchone()
    return int(row[0]) if row else 0


def follow(
    process: Deployed,
    done: Callable[[], int],
    events: int,
    timeout: float,
    echo: Echo,
) -> ProcessMemory:
    """Start ``process``, wait for its health check, then sample (seconds since
    then, ``done()``, RSS) every ``SAMPLE_S`` until ``done()`` reaches ``events``."""
    process.start()
    try:
        process.wait_ready(START_TIMEOUT_S)
        start_mb = rss_mb(process.pid)
        began = time.monotonic()
        deadline = began + timeout
        echoed = began
        samples: list[Sample] = []
        while True:
            tick = time.monotonic()
            process.require_alive()
            count = done()
            samples.append(Sample(round(tick - began, 2), count, round(rss_mb(process.pid), 1)))
            if count >= events:
                break
            if tick > deadline:
                raise RuntimeError(f"{process.name}: {count:,} of {events:,} after {timeout:.0f}s")
            if tick - echoed >= ECHO_EVERY_S:
                echo(f"memory: {process.name} {count:,} of {events:,}, RSS {samples[-1].rss_mb} MB")
                echoed = tick
            time.sleep(max(0.0, SAMPLE_S - (time.monotonic() - tick)))
        peak = peak_rss_mb(process.pid)
    finally:
        process.stop()
    memory = ProcessMemory(process.name, events, start_mb, max(peak, start_mb), samples)
    echo(
        f"memory: {process.name} done in {samples[-1].seconds:.1f} s; RSS {start_mb:.0f} MB at"
        f" start, peak {memory.peak_mb:.0f} MB, {memory.verdict}"
    )
    return memory


def measure_memory(
    box: Sandbox, events: int, echo: Echo
) -> tuple[float, ProcessMemory, ProcessMemory]:
    """Steps 1-4 above: (seconds the seeding took, the relay's memory, the agents')."""
    tenants = [box.tenant(f"m{i}") for i in range(STREAMS)]
    seeded = seed(box.databases, tenants, CATALOG, events, echo)
    echo(f"memory: {events:,} outbox rows seeded in {seeded:.1f} s")
    topic = box.topic("events")
    relay, agents = relay_and_agents(box, topic, "memory", probe="healthz")
    with (
        psycopg.connect(box.databases.resolver_dsn, autocommit=True) as resolver,
        psycopg.connect(box.databases.product_dsn, autocommit=True) as product,
    ):
        echo(f"memory: the relay publishing {events:,} events")
        relay_memory = follow(
            relay, lambda: _published(resolver, tenants), events, 60 + events / 2000, echo
        )
        echo(f"memory: the agents applying {events:,} events")
        agents_memory = follow(
            agents, lambda: _applied(product, tenants), events, 90 + events / 500, echo
        )
    return seeded, relay_memory, agents_memory


def run_memory_bench(events: int, as_json: bool, echo: Echo) -> None:
    """Prepare the local services, run the memory phase in a sandbox, print the figures."""
    from infra.config import use_local_services
    from infra.provision import provision

    use_local_services()
    provision(echo)
    machine = MachineLoad()
    with sandbox(echo, extra_topics={"events": 6, "control": 1, "status": 1}) as box:
        environment = environment_of(box)
        seeded, relay, agents = measure_memory(box, events, echo)
    environment.update(machine.finish())
    out: dict[str, object] = {"backlog_events": events, "seed_s": round(seeded, 1)}
    out.update(relay.as_dict())
    out.update(agents.as_dict())
    out.update(environment)
    if as_json:
        print(json.dumps(out))
    else:
        print(render_memory_table(events, seeded, relay, agents, environment))
