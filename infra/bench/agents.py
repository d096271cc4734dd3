"""Phase (e): the deployed agents catching up a backlog.

What users run is ``gapless agents``, a Faust worker, not phase (c)'s ``Applier.apply``
in a loop. This phase measures it:

1. put ``events`` encoded events on the sandbox's events topic before any agent runs
   (phase (c)'s messages: new items over several streams, contiguous positions,
   keyed by stream as the relay keys them), so the agents meet a backlog;
2. start ``gapless agents`` as a subprocess pointed at the sandbox (its own consumer
   group and web port; no resolver API: the applier does not need it, and the
   progress reports and gap closing only log that it is away);
3. poll the product database until every event has its inbox row; the rate is the
   events over the time from the first apply to the last (``inbox.decided_at``, the
   applying transactions' start, one server clock), so the worker's start-up and
   its first rebalance are left out;
4. the agents' peak RSS (the process and its children) over the catch-up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg
from confluent_kafka import Producer

from db.control.epochs import ensure_epoch
from infra.bench.applier import CATALOG, MessageSource
from infra.bench.memory import peak_rss_mb, rss_mb
from infra.bench.pipeline import logs_dir
from infra.bench.sandbox import Echo, Sandbox, deployed_env
from infra.processes import Deployed, free_port

CONSUMER = "product-applier"
START_TIMEOUT_S = 90.0
POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class AgentsFigures:
    events: int
    seconds: float
    """From the first apply to the last (inbox ``decided_at``)."""
    rss_before_mb: float
    peak_rss_mb: float

    @property
    def eps(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


def publish_messages(bootstrap: str, topic: str, source: MessageSource, events: int) -> None:
    """``events`` of ``source``'s messages onto ``topic``, keyed as the relay keys
    them, all acknowledged before it returns."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True}
    )
    sent = 0
    while sent < events:
        for message in source.batch(min(500, events - sent)):
            while True:
                try:
                    producer.produce(topic, key=message.key, value=message.value)
                    break
                except BufferError:
                    producer.poll(0.05)
            sent += 1
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError(f"the events were not all delivered to {topic}")


def _publish_backlog(box: Sandbox, topic: str, events: int, echo: Echo) -> MessageSource:
    source = MessageSource(box, "backlog")
    with psycopg.connect(box.databases.control_dsn, autocommit=True) as control:
        for tenant in source.tenants:
            ensure_epoch(control, tenant, CATALOG)
    publish_messages(box.bootstrap, topic, source, events)
    echo(f"agents: {events:,} events on {topic}")
    return source


def applied(product_dsn: str, tenants: list[str]) -> tuple[int, float]:
    """(inbox rows of ``tenants``' events, seconds from their first apply to their last)."""
    with psycopg.connect(product_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*), extract(epoch FROM max(decided_at) - min(decided_at))"
            " FROM inbox WHERE consumer = %s AND tenant_id = ANY(%s)",
            (CONSUMER, tenants),
        ).fetchone()
    assert row is not None
    return int(row[0]), float(row[1] or 0.0)


def measure_agents(box: Sandbox, events: int, echo: Echo) -> AgentsFigures:
    """Steps 1-4 above, on the sandbox's topic ``agents``."""
    topic = box.topic("agents")
    env = deployed_env(box, topic)
    source = _publish_backlog(box, topic, events, echo)
    web_port = free_port()
    logs = logs_dir()
    agents = Deployed(
        "agents",
        ["agents"],
        {
            **env,
            "GAPLESS_AGENTS_WEB_PORT": str(web_port),
            "GAPLESS_AGENTS_APP_ID": f"{box.consumer_group}-agents",
            "GAPLESS_AGENTS_CONSUMER": CONSUMER,
            "GAPLESS_RESOLVER_URL": f"http://127.0.0.1:{free_port()}",  # none: see step 2
        },
        logs / f"bench-{box.run_id}-agents.log",
        f"http://127.0.0.1:{web_port}/readyz",
    )
    agents.start()
    try:
        agents.wait_ready(START_TIMEOUT_S)
        before = rss_mb(agents.pid)
        deadline = time.monotonic() + START_TIMEOUT_S + events / 500
        last = -1
        while True:
            agents.require_alive()
            done, seconds = applied(box.databases.product_dsn, source.tenants)
            if done >= events:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the agents applied {done:,} of {events:,} events in time")
            if done // 20_000 != last // 20_000:
                echo(f"agents: {done:,} of {events:,} applied")
            last = done
            time.sleep(POLL_S)
        peak = peak_rss_mb(agents.pid)
    finally:
        agents.stop()
    echo(f"agents: {events:,} events applied in {seconds:.2f} s ({events / seconds:,.0f}/s)")
    return AgentsFigures(events, seconds, before, max(before, peak))
