"""Our side of the projection comparison: the deployed ``gapless agents`` process
catching up a backlog of encoded events on a topic of its own.

The backlog (new catalog items over 8 streams, as phase (c) builds them, epochs
issued first) is produced before the agents start; the clock runs from the first
time the agents' durable progress (``stream_progress``) is seen to move to the
moment it covers every event, so the Faust worker's start-up and first rebalance
are not counted. Each event is one projection row, like the pyeventsourcing side's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg
from confluent_kafka import Producer

from db.epochs import ensure_epoch
from infra.bench.applier import BATCH, MessageSource
from infra.bench.rebuild import LIVE_CONSUMER, process_env
from infra.bench.sandbox import Echo, Sandbox
from infra.bench.timing import Rate
from infra.processes import Deployed, free_port
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


def _produce(box: Sandbox, topic: str, source: MessageSource, events: int) -> None:
    producer = Producer(producer_config(box.bootstrap, 30.0))
    left = events
    while left:
        for m in source.batch(min(BATCH, left)):
            while True:
                try:
                    producer.produce(topic, key=m.key, value=m.value)
                    break
                except BufferError:
                    producer.poll(0.05)
        left -= min(BATCH, left)
    if producer.flush(30.0):
        raise RuntimeError(f"{topic}: the backlog was not delivered")


def measure_agents(box: Sandbox, events: int, echo: Echo) -> Rate:
    """Events/s of the deployed agents catching up ``events`` (the sandbox made the
    ``peers-agents``, ``control`` and ``status`` topics)."""
    topic = box.topic("peers-agents")
    source = MessageSource(box, "pa")
    with psycopg.connect(box.databases.control_dsn, autocommit=True) as control:
        for tenant in source.tenants:
            ensure_epoch(control, tenant, "catalog1")
    echo(f"peers: {events} events on {topic} for the agents")
    _produce(box, topic, source, events)
    web = free_port()
    env = process_env(box, free_port(), web)
    env["GAPLESS_EVENTS_TOPIC"] = topic
    logs = Path(os.environ.get("GAPLESS_LOCAL_DIR", Path.cwd() / ".local")) / "logs"
    agents = Deployed(
        "agents",
        ["agents"],
        env,
        logs / f"bench-{box.run_id}-agents.log",
        f"http://127.0.0.1:{web}/readyz",
    )
    started = time.monotonic()
    agents.start()
    try:
        with psycopg.connect(box.databases.product_dsn, autocommit=True) as conn:
            first: tuple[float, int] | None = None
            deadline = started + START_TIMEOUT_S + events / 200
            while True:
                agents.require_alive()
                applied = _applied(conn, source.tenants)
                now = time.monotonic()
                if first is None and applied > 0:
                    first = (now, applied)
                if applied >= events:
                    break
                if now > deadline:
                    raise RuntimeError(
                        f"agents: {applied} of {events} events applied; see {agents.log}"
                    )
                time.sleep(POLL_S)
    finally:
        agents.stop()
    assert first is not None
    if applied - first[1] >= events // 2:
        return Rate(applied - first[1], now - first[0])
    # Too few events to see the rate after the first poll: count from the start.
    return Rate(events, now - started)
