"""Every long-running process rides out dropped and stalled connections, and the
object store going away, through a real TCP fault proxy.

The resolver API, the relay, the product agents, the capture worker and the job
sweeper run as deployed processes whose PostgreSQL DSNs, Kafka bootstrap and S3 endpoint all go
through toxiproxy (``infra.chaos.proxy``), while writers put decisions through the
resolver database directly and a collector posts feeds to the API. Then, one after
another: every PostgreSQL connection is reset, PostgreSQL stalls (silence, not an
error) for longer than the processes' timeouts, the same for Kafka and for the
object store, and the object store goes down. Each process must say so on /readyz
where its readiness covers what was lost, stay alive, and come back ready without a
restart; at the end the load must have arrived complete and once: every stream's
durable progress at its committed cursor, each event applied or ignored once, the
projection equal to the resolver's items, one receipt, capture and finished job
per idempotency key.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from db.settings import DatabaseSettings
from infra.chaos.proxy import Down, Drop, Fault, Routes, Stall
from infra.demo import captures
from infra.local.collector_keys import mint
from infra.local.layout import current_layout
from infra.processes import Deployed, free_port
from schemas.codec import CODEC
from schemas.settings import KafkaSettings
from tests.fixtures.waits import wait_for
from tests.fixtures.writers import Writers

TENANTS = ("nf-0", "nf-1", "nf-2")
CAPTURE_TENANT = ("nfc-0", "c1")
PRODUCTS = 8


def _processes(routes: Routes, topic: str, logs: Path) -> dict[str, Deployed]:
    api_port, relay_port, agents_port, worker_port, sweep_port = (free_port() for _ in range(5))
    api_url = f"http://127.0.0.1:{api_port}"
    env = routes.environment(
        dict(
            os.environ,
            GAPLESS_EVENTS_TOPIC=topic,
            GAPLESS_RESOLVER_API_PORT=str(api_port),
            GAPLESS_RESOLVER_URL=api_url,
        )
    )

    def process(name: str, health: str, **extra: str) -> Deployed:
        return Deployed(name, [name], {**env, **extra}, logs / f"{name}.log", health)

    return {
        "resolver-api": process("resolver-api", f"{api_url}/readyz"),
        "relay": process(
            "relay",
            f"http://127.0.0.1:{relay_port}/readyz",
            GAPLESS_RELAY_HTTP_PORT=str(relay_port),
        ),
        "agents": process(
            "agents",
            f"http://127.0.0.1:{agents_port}/readyz",
            GAPLESS_AGENTS_APP_ID=f"net-faults-{uuid.uuid4().hex[:8]}",
            GAPLESS_AGENTS_WEB_PORT=str(agents_port),
            GAPLESS_AGENTS_REPORT_INTERVAL_SECONDS="1",
        ),
        "resolver-worker": process(
            "resolver-worker",
            f"http://127.0.0.1:{worker_port}/readyz",
            GAPLESS_WORKER_HTTP_PORT=str(worker_port),
            # A run cut off from its database keeps its claim until it expires: short,
            # so the repair scan resumes such a job within the test.
            GAPLESS_WORKER_CLAIM_SECONDS="15",
            GAPLESS_WORKER_SCAN_INTERVAL_SECONDS="2",
        ),
        # Re-enqueues the jobs whose enqueue failed while Kafka was away.
        "sweep-jobs": process(
            "sweep-jobs",
            f"http://127.0.0.1:{sweep_port}/readyz",
            GAPLESS_SWEEP_HTTP_PORT=str(sweep_port),
            GAPLESS_SWEEP_INTERVAL_SECONDS="1",
        ),
    }


@dataclass
class Collector:
    """Posts feeds to the API until stopped, each under its own idempotency key,
    trying a post again (same key, same body) until it is answered 2xx, as a
    collector whose answer was lost would; records each key's receipts."""

    api_url: str
    token: str
    receipts: dict[str, set[str]] = field(default_factory=dict)
    failed_posts: int = 0
    error: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> None:
        assert self._thread is not None
        self._stop.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the collector did not finish its last post"
        assert self.error is None, repr(self.error)

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        feed = 0
        try:
            with httpx.Client(base_url=self.api_url, timeout=10.0) as http:
                while not self._stop.is_set():
                    self._post(http, headers, feed)
                    feed += 1
                    self._stop.wait(1.0)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def _post(self, http: httpx.Client, headers: dict[str, str], feed: int) -> None:
        key = f"{CAPTURE_TENANT[0]}-feed-{feed}"
        body = captures._capture(captures._feed(feed % 6, PRODUCTS))
        deadline = time.monotonic() + 240
        while True:
            try:
                answer = http.post(
                    "/v1/captures", json=body, headers={**headers, "Idempotency-Key": key}
                )
            except httpx.HTTPError:
                answer = None
            if answer is not None and answer.status_code < 300:
                self.receipts.setdefault(key, set()).add(answer.json()["receipt_id"])
                return
            # Refused for being unavailable, never for what was sent.
            assert answer is None or answer.status_code >= 500, answer.text
            self.failed_posts += 1
            assert time.monotonic() < deadline, f"{key} never accepted"
            time.sleep(0.5)


def _rows(dsn: str, query: str, *params: object) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query, params).fetchall()


def _by_tenant(dsn: str, table: str) -> dict[str, int]:
    rows = _rows(dsn, f"SELECT tenant_id, position FROM {table} WHERE tenant_id LIKE 'nf%%'")
    return {str(t): int(p) for t, p in rows}  # type: ignore[call-overload]


def _published(topic: str) -> dict[str, list[int]]:
    """Every position on the events topic, by tenant, as often as it was published
    (read straight from the broker, not through the proxy)."""
    consumer = Consumer(
        {
            "bootstrap.servers": KafkaSettings().kafka_bootstrap,
            "group.id": f"net-faults-check-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    found: dict[str, list[int]] = {}
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        at_end: set[int] = set()
        deadline = time.monotonic() + 60
        while len(at_end) < len(partitions):
            assert time.monotonic() < deadline, "the events topic was not read to its end"
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                at_end.add(int(message.partition() or 0))
                continue
            event = CODEC.decode_value(message.value() or b"")
            found.setdefault(event.tenant_id, []).append(event.position)
    finally:
        consumer.close()
    return found


def _applied(settings: DatabaseSettings) -> int:
    return sum(_by_tenant(settings.product_dsn, "stream_progress").values())


EVERYONE = ("resolver-api", "relay", "agents", "resolver-worker")
STALL_S = 40.0
"""A stall outlasts the processes' own timeouts: the relay's delivery timeout and
readiness window (30 s), the object store's read timeout (20 s), the agents' Kafka
session timeout (10 s)."""


@dataclass(frozen=True)
class Phase:
    fault: Fault
    hold_s: float  # how long the outage lasts at least
    # Who must report not ready during it (their readiness covers what is lost).
    not_ready: tuple[str, ...]
    # Who must stay ready throughout (they can do their work without it).
    stays_ready: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.fault.kind} {self.fault.target}"


def _phases(routes: Routes) -> list[Phase]:
    worker = ("resolver-worker",)
    others = ("resolver-api", "relay", "agents")
    assert routes.kafka is not None  # a single broker, behind its proxy
    return [
        Phase(Drop(routes.pg), 0.0, EVERYONE),
        Phase(Stall(routes.pg), STALL_S, EVERYONE),
        Phase(Drop(routes.kafka), 5.0, ()),
        # The worker's repair scan needs no broker: its loop must not wait on one.
        Phase(Stall(routes.kafka), STALL_S, ("relay", "agents"), ("resolver-api", *worker)),
        Phase(Drop(routes.s3), 5.0, worker, others),
        Phase(Stall(routes.s3), 25.0, worker, others),
        Phase(Down(routes.s3), 15.0, worker, others),
    ]


@dataclass
class Outage:
    """What each process's /readyz answered during one (None: no answer within 3 s),
    and when each first answered anything but 200, in seconds from the fault."""

    answers: dict[str, set[int | None]]
    first_not_ready: dict[str, float] = field(default_factory=dict)
    lasted_s: float = 0.0

    def __str__(self) -> str:
        def one(name: str) -> str:
            seen = "/".join(sorted(map(str, self.answers[name])))
            first = self.first_not_ready.get(name)
            return f"{name} {seen}" + (f" (from {first:.0f}s)" if first is not None else "")

        return ", ".join(one(name) for name in self.answers)


def _outage(phase: Phase, processes: dict[str, Deployed]) -> Outage:
    """Apply the phase's fault; hold it at least ``hold_s`` and until every process
    of ``not_ready`` was seen not ready (each alive throughout); heal."""
    outage = Outage({name: set() for name in processes})
    started = time.monotonic()

    def held() -> bool:
        for name, p in processes.items():
            assert p.alive(), p.tail()
            answer = p.health()
            outage.answers[name].add(answer)
            if answer != 200:
                outage.first_not_ready.setdefault(name, time.monotonic() - started)
        met = all(n in outage.first_not_ready for n in phase.not_ready)
        return met and time.monotonic() - started >= phase.hold_s

    phase.fault.apply()
    try:
        wait_for(held, f"{', '.join(phase.not_ready) or 'the hold'} under {phase.name}", 180)
    finally:
        phase.fault.heal()
    outage.lasted_s = time.monotonic() - started
    for name in phase.stays_ready:
        assert outage.answers[name] == {200}, f"{name} under {phase.name}: {outage}"
    return outage


@pytest.mark.slow
def test_every_process_recovers_from_dropped_and_stalled_connections(
    clean_db: DatabaseSettings, topic: str, fault_routes: Routes, tmp_path: Path
) -> None:
    layout = current_layout()
    processes = _processes(fault_routes, topic, tmp_path)
    api = processes["resolver-api"]
    assert api.health_url is not None
    api_url = api.health_url.removesuffix("/readyz")
    writers = Writers(clean_db, TENANTS, pause_s=0.05)
    tenant = CAPTURE_TENANT[0]
    collector = Collector(api_url, mint(layout, captures.client_id(tenant)))
    timeline: list[str] = []

    def all_ready() -> bool:
        return all(p.health() == 200 for p in processes.values())

    try:
        for p in processes.values():
            p.start()
        wait_for(all_ready, "every process ready", 120)
        captures.register_collectors(clean_db, [CAPTURE_TENANT])
        token = os.environ["GAPLESS_RESOLVER_TOKEN"]
        with httpx.Client(
            base_url=api_url, headers={"Authorization": f"Bearer {token}"}, timeout=30.0
        ) as http:
            captures.activate_identity(http, [CAPTURE_TENANT])
        writers.start()
        collector.start()
        wait_for(lambda: _applied(clean_db) >= 30, "the first events applied", 90)

        for phase in _phases(fault_routes):
            applied_before = _applied(clean_db)
            posted_before = len(collector.receipts)
            outage = _outage(phase, processes)
            healed = time.monotonic()
            wait_for(all_ready, f"every process ready after {phase.name}", 120)
            wait_for(
                lambda b=applied_before: _applied(clean_db) > b,  # type: ignore[misc]
                f"events applied again after {phase.name}",
                120,
            )
            wait_for(
                lambda b=posted_before: len(collector.receipts) > b,  # type: ignore[misc]
                f"captures accepted again after {phase.name}",
                120,
            )
            line = (
                f"{phase.name}: {outage.lasted_s:.0f}s down, all ready and applying again"
                f" {time.monotonic() - healed:.0f}s after; readyz: {outage}"
            )
            timeline.append(line)
            print(line, flush=True)

        collector.stop(timeout=300)
        writers.stop()
        posted = len(collector.receipts)
        # The worker's decisions are writes too: the cursors are final once it is done.
        wait_for(
            lambda: captures.job_counts(clean_db, "nfc").get("done", 0) == posted,
            "every capture job done",
            180,
        )
        cursors = _by_tenant(clean_db.resolver_dsn, "stream_cursor")
        assert set(TENANTS) | {tenant} <= set(cursors)
        wait_for(
            lambda: _by_tenant(clean_db.product_dsn, "stream_progress") == cursors,
            "progress at every cursor",
            180,
        )
        assert all(p.alive() for p in processes.values())
    finally:
        writers._stop.set()
        for p in reversed(list(processes.values())):
            p.stop()
    logs = "\n".join([*timeline, *(p.tail() for p in processes.values())])
    for p in processes.values():
        assert p.popen is not None and p.popen.returncode in (0, -signal.SIGTERM), (
            f"{p.name} exited with {p.popen.returncode if p.popen else None}\n{logs}"
        )

    # Published positions contiguous: every committed position of every stream is on
    # the topic (some twice: a batch whose delivery reports timed out goes again).
    published = _published(topic)
    for stream, cursor in cursors.items():
        assert set(published.get(stream, [])) == set(range(1, cursor + 1)), stream
    # Nothing lost, nothing doubled: each committed position applied or ignored once.
    committed = sum(cursors.values())
    counted = _rows(
        clean_db.product_dsn,
        "SELECT sum(applied_count + ignored_count) FROM stream_progress"
        " WHERE tenant_id LIKE 'nf%%'",
    )[0][0]
    assert counted == committed, logs
    accepted = _rows(
        clean_db.resolver_dsn,
        "SELECT tenant_id, item_id, revision FROM catalog_item WHERE tenant_id LIKE 'nf%%'"
        " ORDER BY 1, 2",
    )
    projected = _rows(
        clean_db.product_dsn,
        "SELECT tenant_id, item_id, revision FROM product_item WHERE tenant_id LIKE 'nf%%'"
        " ORDER BY 1, 2",
    )
    assert projected == accepted
    # Intake exactly once: one receipt per key (a retried post got the same one), and
    # one capture and one finished job per receipt.
    assert collector.failed_posts > 0  # the collector did meet the faults
    assert all(len(r) == 1 for r in collector.receipts.values())
    for table in ("receipt", "capture", "intake_job"):
        n = _rows(
            clean_db.resolver_dsn, f"SELECT count(*) FROM {table} WHERE tenant_id = %s", tenant
        )
        assert n[0][0] == posted, (table, n, posted)
