"""A shadow rebuild through the control topic, carried out by the deployed processes
while writers commit, and SIGKILLed inside each phase.

The resolver API, the relay and two agent workers run as users run them. A rebuild
of one catalog is published on the control topic twice with one request id, and a
second request for the same catalog after it; then, in each phase from ``leased``
to ``catching_up``, the process under test is killed with SIGKILL and started
again: the agent worker holding the rebuild's claim, or (the other run) the resolver
API. The rebuild must finish (resuming from its last committed phase, or starting
over with a new lease and export), exactly one rebuild row must exist, the second
request must be answered as already rebuilding, no reader may ever see the new
generation before its cutover, live progress never moves backwards, and at the end
both catalogs' projections equal the accepted state row by row.

A kill inside the cutover transaction itself (milliseconds long) is proved at the
integration level: ``tests/integration/processors/rebuild/test_cutover.py``.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.product import rebuilds as sql
from db.settings import DatabaseSettings
from infra.demo.projection_check import compare
from infra.demo.workload import run_workload
from infra.processes import Deployed, free_port
from schemas import control
from schemas.control import ControlCommand
from schemas.settings import KafkaSettings
from tests.fixtures.waits import wait_for

REBUILT = ("rb-0", "c1")
OTHER = ("rb-1", "c1")


@dataclass(frozen=True)
class Topics:
    """A control and a status topic of the test's own (``GAPLESS_CONTROL_TOPIC``,
    ``GAPLESS_REBUILD_STATUS_TOPIC``): an agent of a new consumer group reads the
    control topic from its start, and must not meet another test's requests."""

    control: str
    status: str


@pytest.fixture()
def topics(kafka_settings: KafkaSettings) -> Iterator[Topics]:
    run = uuid.uuid4().hex[:12]
    made = Topics(f"test.control.{run}", f"test.rebuild-status.{run}")
    admin = AdminClient({"bootstrap.servers": kafka_settings.kafka_bootstrap})
    for future in admin.create_topics(
        [NewTopic(made.control, 1, 1), NewTopic(made.status, 1, 1)]
    ).values():
        future.result(timeout=30)
    yield made
    for future in admin.delete_topics([made.control, made.status]).values():
        future.result(timeout=30)


KILL_IN = ("leased", "exporting", "loading", "catching_up")


def _processes(topic: str, topics: Topics, logs: Path) -> dict[str, Deployed]:
    api_port, relay_port = free_port(), free_port()
    api_url = f"http://127.0.0.1:{api_port}"
    app_id = f"rebuild-e2e-{uuid.uuid4().hex[:8]}"
    env = dict(
        os.environ,
        GAPLESS_EVENTS_TOPIC=topic,
        GAPLESS_CONTROL_TOPIC=topics.control,
        GAPLESS_REBUILD_STATUS_TOPIC=topics.status,
        GAPLESS_RESOLVER_API_PORT=str(api_port),
        GAPLESS_RESOLVER_URL=api_url,
        GAPLESS_EXPORT_CHUNK_RECORDS="4",  # many chunks: a load long enough to kill inside
    )
    agents = dict(
        GAPLESS_AGENTS_APP_ID=app_id,
        GAPLESS_AGENTS_REPORT_INTERVAL_SECONDS="1",
        GAPLESS_AGENTS_REBUILD_INTERVAL_SECONDS="2",
        GAPLESS_REBUILD_STEPS_PER_TICK="1",  # each phase lasts a tick: a kill lands in it
        GAPLESS_REBUILD_CLAIM_SECONDS="4",
        GAPLESS_REBUILD_STALE_EXPORT_SECONDS="4",
        GAPLESS_REBUILD_LEASE_TTL_SECONDS="60",
        GAPLESS_REBUILD_MAX_ATTEMPTS="6",
        GAPLESS_AGENTS_SESSION_TIMEOUT_SECONDS="6",
    )

    def process(name: str, args: list[str], health: str, **extra: str) -> Deployed:
        return Deployed(name, args, {**env, **extra}, logs / f"{name}.log", health)

    a_port, b_port = free_port(), free_port()
    return {
        "resolver-api": process("resolver-api", ["resolver-api"], f"{api_url}/readyz"),
        "relay": process(
            "relay",
            ["relay"],
            f"http://127.0.0.1:{relay_port}/readyz",
            GAPLESS_RELAY_HTTP_PORT=str(relay_port),
        ),
        "agents-a": process(
            "agents-a",
            ["agents"],
            f"http://127.0.0.1:{a_port}/readyz",
            GAPLESS_AGENTS_WEB_PORT=str(a_port),
            **agents,
        ),
        "agents-b": process(
            "agents-b",
            ["agents"],
            f"http://127.0.0.1:{b_port}/readyz",
            GAPLESS_AGENTS_WEB_PORT=str(b_port),
            **agents,
        ),
    }


@dataclass
class Watch:
    """Every 20 ms: the live consumer's generation of the rebuilt stream and its
    position, and the rebuild's phase, as a reader of the product database sees them."""

    dsn: str
    seen: list[tuple[int, int, str | None, int | None]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stop.is_set():
                    with conn.transaction():
                        live = conn.execute(
                            "SELECT generation, position FROM stream_progress"
                            " WHERE consumer = 'product-applier' AND tenant_id = %s"
                            " AND catalog_id = %s",
                            REBUILT,
                        ).fetchone()
                        rebuild = conn.execute(
                            "SELECT phase, previous_generation FROM rebuild"
                            " WHERE tenant_id = %s AND catalog_id = %s",
                            REBUILT,
                        ).fetchone()
                    if live is not None:
                        phase, previous = rebuild if rebuild else (None, None)
                        self.seen.append((int(live[0]), int(live[1]), phase, previous))
                    self.stop.wait(0.02)
        except BaseException as exc:
            self.error = exc


def _publish(bootstrap: str, topic: str, *commands: ControlCommand) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for command in commands:
        producer.produce(topic, key=command.key(), value=control.encode(command))
    assert producer.flush(15) == 0


def _request(kind: str = "rebuild") -> ControlCommand:
    return ControlCommand(
        command_id=uuid.uuid4(),
        kind=kind,
        tenant_id=REBUILT[0],
        catalog_id=REBUILT[1],
        requested_by="e2e",
        reason="drill",
        requested_at=datetime.now(UTC),
    )


def _rebuild(settings: DatabaseSettings, rebuild_id: uuid.UUID) -> sql.RebuildRow | None:
    with psycopg.connect(settings.product_dsn) as conn:
        return sql.get(conn, rebuild_id)


def _refusals(bootstrap: str, topic: str, rebuild_id: uuid.UUID) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4()}"})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])  # the test's own topic
    found: list[str] = []
    deadline = time.monotonic() + 30
    while not found and time.monotonic() < deadline:
        for message in consumer.consume(200, timeout=1):
            value = message.value()
            if message.error() is None and value is not None:
                status = control.decode_status(value)
                if status.rebuild_id == rebuild_id and status.phase == "rejected":
                    found.append(str(status.error_code))
    consumer.close()
    return found


def _committed(settings: DatabaseSettings) -> dict[str, int]:
    with psycopg.connect(settings.resolver_dsn) as conn:
        rows = conn.execute(
            "SELECT tenant_id, position FROM stream_cursor WHERE tenant_id LIKE 'rb-%'"
        ).fetchall()
    return {t: int(p) for t, p in rows}


def _progress(settings: DatabaseSettings) -> dict[str, int]:
    with psycopg.connect(settings.product_dsn) as conn:
        rows = conn.execute(
            "SELECT tenant_id, position FROM stream_progress WHERE consumer = 'product-applier'"
            " AND tenant_id LIKE 'rb-%'"
        ).fetchall()
    return {t: int(p) for t, p in rows}


@pytest.fixture()
def writers(clean_db: DatabaseSettings) -> Iterator[threading.Event]:
    """Decisions on both catalogs, about 20 a second, until the test stops them."""
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    stop = threading.Event()
    thread = threading.Thread(
        target=run_workload,
        args=(pool, epochs, [REBUILT, OTHER], 1_000_000, 2),
        kwargs={"stop": stop, "pace_seconds": 0.1},
        daemon=True,
    )
    thread.start()
    yield stop
    stop.set()
    thread.join(60)
    pool.close()
    epochs.close()


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["agents", "resolver-api"])
def test_a_rebuild_survives_sigkill_in_every_phase_under_load(
    clean_db: DatabaseSettings,
    kafka_settings: KafkaSettings,
    topic: str,
    topics: Topics,
    writers: threading.Event,
    tmp_path: Path,
    victim: str,
) -> None:
    processes = _processes(topic, topics, tmp_path)
    watch = Watch(clean_db.product_dsn)
    watcher = threading.Thread(target=watch.run, daemon=True)
    bootstrap = kafka_settings.kafka_bootstrap

    def logs() -> str:
        return "\n".join(p.tail() for p in processes.values())

    try:
        for p in processes.values():
            p.start()
        wait_for(lambda: all(p.health() == 200 for p in processes.values()), "every process", 120)
        wait_for(lambda: _progress(clean_db).get(REBUILT[0], 0) >= 200, "the first events", 90)
        watcher.start()

        # One id delivered twice, then a second request in the same batch: the worker
        # holding the control partition reads all three in one fetch, so the second
        # meets the first unfinished (published later, after a kill, it could wait out
        # the rebalances until the first is done, and rightly start a rebuild).
        request, second = _request(), _request()
        _publish(bootstrap, topics.control, request, request, second)
        wait_for(lambda: _rebuild(clean_db, request.command_id) is not None, "the row", 60)

        killed: list[str] = []
        for phase in KILL_IN:

            def reached(phase: str = phase) -> bool:
                row = _rebuild(clean_db, request.command_id)
                assert row is not None
                assert row.phase != "failed", (row.error_code, row.error_message, logs())
                if phase == "loading":  # inside the load: some chunks in, not all
                    return row.phase == "loading" and row.chunks_loaded >= 1
                return row.phase == phase

            deadline = time.monotonic() + 120
            while not reached():  # finer than wait_for: the load lasts about a second
                assert time.monotonic() < deadline, f"timed out waiting for phase {phase}"
                time.sleep(0.02)
            row = _rebuild(clean_db, request.command_id)
            assert row is not None
            if victim == "agents":
                with psycopg.connect(clean_db.product_dsn) as conn:
                    holder = conn.execute(
                        "SELECT claimed_by FROM rebuild WHERE rebuild_id = %s",
                        (request.command_id,),
                    ).fetchone()
                pid = int(str(holder[0]).rsplit("-", 1)[1]) if holder and holder[0] else None
                pids = {n: processes[n].pid for n in ("agents-a", "agents-b")}
                name = next((n for n, p in pids.items() if p == pid), "")
                assert name, f"the claim {holder} names none of the workers {pids}"
            else:
                name = "resolver-api"
            processes[name].kill()
            killed.append(f"{name} in {row.phase}")
            processes[name].start()

        wait_for(
            lambda: (
                (r := _rebuild(clean_db, request.command_id)) is not None
                and r.phase in ("done", "failed")
            ),
            "the rebuild to finish",
            180,
        )
        done = _rebuild(clean_db, request.command_id)
        assert done is not None and done.phase == "done", (done, killed, logs())
        writers.set()
        wait_for(lambda: all(p.health() == 200 for p in processes.values()), "every process", 90)
        wait_for(lambda: _progress(clean_db) == _committed(clean_db), "progress at cursors", 120)
    finally:
        watch.stop.set()
        watcher.join(10)
        for p in reversed(list(processes.values())):
            p.stop()

    assert watch.error is None, repr(watch.error)
    # The second request was answered as already rebuilding (once per delivery: a
    # rebalance may deliver the command again, and the answer is only informational).
    refusals = set(_refusals(kafka_settings.kafka_bootstrap, topics.status, second.command_id))
    with psycopg.connect(clean_db.product_dsn) as conn:
        rows = conn.execute(
            "SELECT rebuild_id, phase, created_at FROM rebuild WHERE tenant_id = %s",
            (REBUILT[0],),
        ).fetchall()
    # The request delivered twice is one rebuild; the second was refused.
    assert len(rows) == 1, (rows, refusals, killed)
    assert refusals == {"ALREADY_REBUILDING"}, (refusals, killed)
    assert len(killed) == len(KILL_IN), killed
    assert done.generation is not None and done.previous_generation == 1
    # No reader saw the new generation before the cutover committed, and the live
    # position never went back.
    generations = {g for g, _p, _phase, _prev in watch.seen}
    assert generations <= {1, done.generation}, generations
    assert all(prev is not None for g, _p, _ph, prev in watch.seen if g == done.generation)
    positions = [p for _g, p, _ph, _prev in watch.seen]
    assert positions == sorted(positions)
    assert done.generation in generations and 1 in generations
    # Both catalogs equal the accepted state row by row; the rebuilt one in its new
    # generation, the other in generation 1.
    for tenant, generation in ((REBUILT[0], done.generation), (OTHER[0], 1)):
        comparison = compare(clean_db.resolver_dsn, clean_db.product_dsn, tenant, generation)
        assert comparison.differences == [], (tenant, comparison.differences[:5], killed)
