"""The rebuild state machine against the real resolver API, PostgreSQL and S3: a
request goes requested -> leased -> exporting -> loading -> catching_up, one committed
phase per step; a claim keeps a second worker off; a lease that expires makes it
start over with a new lease and export, and attempts run out into a failure."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.product import rebuilds as sql
from db.settings import DatabaseSettings
from infra.demo.workload import run_workload
from processors.rebuild.orchestrator import Orchestrator
from processors.rebuild.status import StatusPublisher
from processors.resolver_client import ResolverClient
from producers.exports.settings import ExportSettings
from producers.exports.store import ExportStore
from schemas.control import RebuildStatus, decode_status
from schemas.ids import StreamId
from schemas.settings import KafkaSettings
from schemas.topics import REBUILD_STATUS_TOPIC
from tests.fixtures.resolver_api import RunningApi

TENANT, CATALOG = "x", "catalog1"
STREAM = StreamId(TENANT, CATALOG, 1)


@pytest.fixture()
def orchestrator(
    clean_db: DatabaseSettings, resolver_api: RunningApi, services: dict[str, str]
) -> Iterator[Orchestrator]:
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    run_workload(pool, epochs, [(TENANT, CATALOG)], events=200, writers=2)
    pool.close()
    epochs.close()
    client = ResolverClient(resolver_api.url, resolver_api.token)
    store = ExportStore.from_settings(ExportSettings())
    yield Orchestrator(clean_db.product_dsn, client, store.get, "worker-a", max_attempts=2)
    client.close()


def _request(settings: DatabaseSettings) -> uuid.UUID:
    rebuild_id = uuid.uuid4()
    with psycopg.connect(settings.product_dsn) as conn:
        assert sql.insert(conn, rebuild_id, "product-applier", STREAM, "shadow-1", "op", "test")
    return rebuild_id


def _until(o: Orchestrator, rebuild_id: uuid.UUID, phase: str) -> list[str]:
    phases: list[str] = []
    deadline = time.monotonic() + 60
    while True:
        row = o.advance(rebuild_id)
        assert row is not None
        if not phases or phases[-1] != row.phase:
            phases.append(row.phase)
        if row.phase in (phase, "failed"):
            return phases
        assert time.monotonic() < deadline, phases


def test_a_request_goes_through_the_phases_to_a_loaded_shadow(
    clean_db: DatabaseSettings, orchestrator: Orchestrator
) -> None:
    rebuild_id = _request(clean_db)
    phases = _until(orchestrator, rebuild_id, "catching_up")
    assert phases == ["leased", "exporting", "loading", "catching_up"]
    with psycopg.connect(clean_db.product_dsn) as conn:
        row = sql.get(conn, rebuild_id)
        shadow = conn.execute(
            "SELECT position, generation FROM stream_progress WHERE consumer = 'shadow-1'"
        ).fetchone()
        items = conn.execute(
            "SELECT count(*) FROM product_item WHERE generation = %s",
            (row.generation if row else None,),
        ).fetchone()
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        accepted = conn.execute("SELECT count(*) FROM catalog_item").fetchone()
        pin = conn.execute("SELECT pinned_position FROM rebuild_lease").fetchone()
    assert row is not None and row.generation == 2 and row.attempt == 1
    assert shadow == (row.export_position, 2) and pin == (row.export_position,)
    assert items == accepted and row.rows_loaded > 0
    assert row.chunks_loaded == row.chunks_total


def test_a_claimed_rebuild_is_left_to_its_worker(
    clean_db: DatabaseSettings, orchestrator: Orchestrator
) -> None:
    rebuild_id = _request(clean_db)
    assert orchestrator.advance(rebuild_id) is not None
    other = Orchestrator(
        orchestrator.product_dsn, orchestrator.client, orchestrator.fetch, "worker-b"
    )
    assert other.advance(rebuild_id) is None
    with psycopg.connect(clean_db.product_dsn) as conn:
        conn.execute(
            "UPDATE rebuild SET claim_expires_at = clock_timestamp() - interval '1 second'"
        )
    taken = other.advance(rebuild_id)  # its worker died: the claim expired
    assert taken is not None and taken.phase == "exporting"


def test_a_lease_that_expires_starts_over_and_attempts_run_out(
    clean_db: DatabaseSettings, orchestrator: Orchestrator
) -> None:
    rebuild_id = _request(clean_db)
    assert _until(orchestrator, rebuild_id, "leased")[-1] == "leased"

    def expire() -> None:
        with psycopg.connect(clean_db.resolver_dsn) as conn:
            conn.execute(
                "UPDATE rebuild_lease SET expires_at = clock_timestamp() - interval '1 second'"
            )

    expire()
    again = orchestrator.advance(rebuild_id)
    assert again is not None
    assert (again.phase, again.attempt, again.error_code) == ("requested", 2, "LEASE_GONE")
    assert _until(orchestrator, rebuild_id, "leased")[-1] == "leased"
    expire()
    failed = orchestrator.advance(rebuild_id)
    assert failed is not None and (failed.phase, failed.error_code) == ("failed", "LEASE_GONE")
    assert failed.error_message and "attempt 2 of 2" in failed.error_message


def test_each_committed_phase_is_published_as_a_status_event(
    clean_db: DatabaseSettings, orchestrator: Orchestrator, kafka_settings: KafkaSettings
) -> None:
    publisher = StatusPublisher(kafka_settings.kafka_bootstrap)
    orchestrator.on_change = publisher.row_changed
    rebuild_id = _request(clean_db)
    _until(orchestrator, rebuild_id, "catching_up")
    assert publisher.flush(10) == 0
    consumer = Consumer(
        {"bootstrap.servers": kafka_settings.kafka_bootstrap, "group.id": f"t-{uuid.uuid4()}"}
    )
    consumer.assign([TopicPartition(REBUILD_STATUS_TOPIC, 0, 0)])
    seen: list[RebuildStatus] = []
    deadline = time.monotonic() + 30
    while not seen or seen[-1].phase != "catching_up":
        assert time.monotonic() < deadline, [s.phase for s in seen]
        for message in consumer.consume(100, timeout=1):
            status = decode_status(message.value())
            if status.rebuild_id == rebuild_id:
                seen.append(status)
    consumer.close()
    assert [s.phase for s in seen] == ["leased", "exporting", "loading", "catching_up"]
    assert seen[-1].rows_loaded > 0 and seen[-1].chunks_loaded == seen[-1].chunks_total
