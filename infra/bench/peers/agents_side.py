"""Our side of the projection comparison: the deployed ``gapless agents`` process
catching up a backlog of encoded events on a topic of its own.

The backlog (new catalog items over 8 streams, as phase (c) builds them, epochs
issued first) is encoded first, then produced once the agents are ready (each has
joined the group and sits idle), so neither the Faust worker's start-up nor a
rebalance is timed. The clock runs from the first apply (the earliest inbox row's
``received_at``: the start of the transaction that applied it) to the moment the
agents' durable progress (``stream_progress``) is seen to cover every event, as the
pyeventsourcing side's runs over a backlog already in its store, from the runner's
start to its last tracking row. Producing the backlog is Kafka's and this bench's
work, not the agents': on two cores the agents apply nothing until the producer is
done (0.55 s of a 2.4 s run at 20,000 events), so a clock from the start of
producing charged them with it. Should the agents keep pace with the producer
instead, this clock only runs longer. (From the first progress seen, a backlog that
one batch applies whole would take no time at all; from its transaction's start it
takes that transaction's time.) Each event is one projection row, like the
pyeventsourcing side's. With two processes (``processes=2``), the way a 2-core host
would run the agents, each takes half the topic's partitions.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg
from confluent_kafka import Producer

from db.control.epochs import ensure_epoch
from infra.bench.applier import BATCH, MessageSource
from infra.bench.rebuild_deployed import LIVE_CONSUMER, process_env
from infra.bench.sandbox import Echo, Sandbox
from infra.bench.timing import Rate
from infra.processes import Deployed, free_port
from processors.applier.messages import RawMessage
from producers.relay.publisher import producer_config

START_TIMEOUT_S = 90.0
POLL_S = 0.02


def _applied(conn: psycopg.Connection, tenants: list[str]) -> int:
    """Events applied so far: positions are contiguous from 1 in every stream."""
    row = conn.execute(
        "SELECT coalesce(sum(position), 0) FROM stream_progress"
        " WHERE consumer = %s AND tenant_id = ANY(%s)",
        (LIVE_CONSUMER, tenants),
    ).fetchone()
    return int(row[0]) if row else 0


def _first_apply(conn: psycopg.Connection, tenants: list[str]) -> float:
    """When the backlog's first apply began (epoch seconds, the server's clock, which
    is this host's)."""
    row = conn.execute(
        "SELECT extract(epoch FROM min(received_at)) FROM inbox"
        " WHERE consumer = %s AND tenant_id = ANY(%s)",
        (LIVE_CONSUMER, tenants),
    ).fetchone()
    if row is None or row[0] is None:
        raise RuntimeError("agents: no inbox row for the backlog")
    return float(row[0])


def _messages(source: MessageSource, events: int) -> list[RawMessage]:
    """The backlog, encoded before any clock runs."""
    out: list[RawMessage] = []
    while len(out) < events:
        out.extend(source.batch(min(BATCH, events - len(out))))
    return out


def _produce(box: Sandbox, topic: str, messages: list[RawMessage]) -> None:
    producer = Producer(producer_config(box.bootstrap, 30.0))
    for m in messages:
        while True:
            try:
                producer.produce(topic, key=m.key, value=m.value)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(30.0):
        raise RuntimeError(f"{topic}: the backlog was not delivered")


def measure_agents(box: Sandbox, events: int, echo: Echo, processes: int = 1) -> Rate:
    """Events/s of ``processes`` deployed agents (one consumer group, the topic's
    partitions split between them) catching up ``events`` produced on a topic of
    their own once every one of them is ready (has joined the group), timed from the
    first apply to the last (module docstring); the sandbox made the topic
    ``peers-agents<processes>`` and the ``control`` and ``status`` topics."""
    topic = box.topic(f"peers-agents{processes}")
    source = MessageSource(box, f"pa{processes}-")
    with psycopg.connect(box.databases.control_dsn, autocommit=True) as control:
        for tenant in source.tenants:
            ensure_epoch(control, tenant, "catalog1")
    messages = _messages(source, events)
    logs = Path(os.environ.get("GAPLESS_LOCAL_DIR", Path.cwd() / ".local")) / "logs"
    workers = []
    for n in range(processes):
        web = free_port()
        env = process_env(box, free_port(), web)
        env["GAPLESS_EVENTS_TOPIC"] = topic
        workers.append(
            Deployed(
                f"agents-{n + 1}",
                ["agents"],
                env,
                logs / f"bench-{box.run_id}-peers-agents{processes}-{n + 1}.log",
                f"http://127.0.0.1:{web}/readyz",
            )
        )
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.wait_ready(START_TIMEOUT_S)
        echo(f"peers: {events} events on {topic} for {processes} agents process(es)")
        producing = time.time()
        _produce(box, topic, messages)
        with psycopg.connect(box.databases.product_dsn, autocommit=True) as conn:
            deadline = time.monotonic() + START_TIMEOUT_S + events / 200
            while True:
                for worker in workers:
                    worker.require_alive()
                applied = _applied(conn, source.tenants)
                if applied >= events:
                    finished = time.time()
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"agents: {applied} of {events} events applied; see {workers[0].log}"
                    )
                time.sleep(POLL_S)
            first = _first_apply(conn, source.tenants)
    finally:
        for worker in workers:
            worker.stop()
    if first < producing:
        raise RuntimeError("agents: an inbox row of the backlog predates its producing")
    return Rate(events, finished - first)
