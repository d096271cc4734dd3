"""A throttled catch-up, against the real resolver API, PostgreSQL and S3: it applies
in pages of one slice of the rate, paced to it, still reaches its target and the
rebuild cuts over to the accepted state; and a catch-up steps aside while a live
batch of its process is in flight."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.product import rebuilds as sql
from db.settings import DatabaseSettings
from infra.demo.projection_check import compare
from infra.demo.workload import run_workload
from processors.live_first import LiveFirst
from processors.rebuild.catchup import CatchUp, Throttle, catch_up
from processors.rebuild.orchestrator import Orchestrator
from processors.resolver_client import ResolverClient
from producers.exports.settings import ExportSettings
from producers.exports.store import ExportStore
from schemas.ids import StreamId
from schemas.registry_codec import RegistryCodec, registry_client
from tests.fixtures.resolver_api import RunningApi

TENANT, CATALOG = "x", "catalog1"
STREAM = StreamId(TENANT, CATALOG, 1)
RATE = 200.0


@pytest.fixture()
def orchestrator(
    clean_db: DatabaseSettings, resolver_api: RunningApi, services: dict[str, str]
) -> Iterator[Orchestrator]:
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    run_workload(pool, epochs, [(TENANT, CATALOG)], events=200, writers=2)
    client = ResolverClient(resolver_api.url, resolver_api.token)
    store = ExportStore.from_settings(ExportSettings())
    yield Orchestrator(
        clean_db.product_dsn,
        client,
        store.get,
        "worker-a",
        epochs=EpochSource(clean_db.control_dsn),
        catchup_max_events_per_second=RATE,
    )
    client.close()
    pool.close()
    epochs.close()


def _write(settings: DatabaseSettings, events: int, tag: str) -> int:
    """Decisions after W; the stream's committed position after them."""
    with ConnectionPool(settings.resolver_dsn, min_size=1, max_size=2, open=True) as pool:
        epochs = EpochSource(settings.control_dsn)
        run_workload(pool, epochs, [(TENANT, CATALOG)], events=events, writers=2, id_tag=tag)
        epochs.close()
    with psycopg.connect(settings.resolver_dsn) as conn:
        row = conn.execute(
            "SELECT position FROM stream_cursor WHERE tenant_id = %s AND catalog_id = %s"
            " AND history_epoch = %s",
            tuple(STREAM),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _request(settings: DatabaseSettings) -> uuid.UUID:
    rebuild_id = uuid.uuid4()
    with psycopg.connect(settings.product_dsn) as conn:
        assert sql.insert(conn, rebuild_id, "product-applier", STREAM, "shadow-1", "op", "t")
    return rebuild_id


def _until(o: Orchestrator, rebuild_id: uuid.UUID, phase: str) -> sql.RebuildRow:
    deadline = time.monotonic() + 90
    while True:
        row = o.advance(rebuild_id)
        assert row is not None
        if row.phase in (phase, "failed", "done"):
            return row
        assert time.monotonic() < deadline, row.phase


def test_a_throttled_catch_up_is_paced_in_slices_and_reaches_the_target(
    clean_db: DatabaseSettings, orchestrator: Orchestrator
) -> None:
    rebuild_id = _request(clean_db)
    row = _until(orchestrator, rebuild_id, "catching_up")
    assert row.phase == "catching_up" and row.lease_id is not None
    committed = _write(clean_db, 300, "after-w-")
    behind = committed - (row.export_position or 0)
    assert behind >= 300
    steps: list[int] = []
    began = time.monotonic()
    result = catch_up(
        orchestrator.client,
        orchestrator.shadow(row),
        str(row.lease_id),
        STREAM,
        None,
        budget_seconds=60,
        on_page=steps.append,
        throttle=Throttle(RATE),
    )
    elapsed = time.monotonic() - began
    assert result.caught_up and result.progress == result.target == committed
    page = Throttle(RATE).page(2000)
    moves = [b - a for a, b in zip([row.export_position or 0, *steps], steps, strict=False)]
    assert max(moves) <= page < behind  # one slice a page, not the whole lag at once
    assert elapsed >= (behind - page) / RATE  # paced: the last page needs no wait


def test_a_throttled_rebuild_catches_up_and_cuts_over(
    clean_db: DatabaseSettings, orchestrator: Orchestrator
) -> None:
    rebuild_id = _request(clean_db)
    row = _until(orchestrator, rebuild_id, "catching_up")
    committed = _write(clean_db, 300, "after-w-")
    behind = committed - (row.export_position or 0)
    row = _until(orchestrator, rebuild_id, "done")
    assert row.phase == "done", (row.phase, row.error_message)
    assert row.target_position is not None and row.target_position >= committed
    assert row.timings["catching_up"] >= (behind - Throttle(RATE).page(2000)) / RATE
    with psycopg.connect(clean_db.product_dsn) as conn:
        live = conn.execute(
            "SELECT position, generation FROM stream_progress WHERE consumer = 'product-applier'"
        ).fetchone()
    assert live == (row.target_position, 2)
    comparison = compare(clean_db.resolver_dsn, clean_db.product_dsn, TENANT, 2)
    assert comparison.differences == [], comparison.differences[:5]


def test_the_catch_up_waits_while_a_live_batch_of_its_process_is_in_flight(
    clean_db: DatabaseSettings, orchestrator: Orchestrator
) -> None:
    rebuild_id = _request(clean_db)
    row = _until(orchestrator, rebuild_id, "catching_up")
    assert row.lease_id is not None
    committed = _write(clean_db, 100, "live-first-")
    gate = LiveFirst(max_wait_s=60.0)
    pages: list[int] = []
    done: list[CatchUp] = []

    def run() -> None:
        done.append(
            catch_up(
                orchestrator.client,
                orchestrator.shadow(row),
                str(row.lease_id),
                STREAM,
                None,
                budget_seconds=60,
                page_size=40,
                on_page=pages.append,
                before_page=gate.yield_to_live,
            )
        )

    with gate.live():  # a live batch in flight
        background = threading.Thread(target=run)
        background.start()
        background.join(0.5)
        assert background.is_alive() and pages == []  # not one page meanwhile
    background.join(60)
    assert done and done[0].caught_up and done[0].progress == committed
    assert len(pages) > 1 and gate.waited_s > 0


def test_a_catch_up_waits_through_a_registry_outage_and_goes_on(
    clean_db: DatabaseSettings,
    orchestrator: Orchestrator,
    registry_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Events after W in the Confluent framing, and a worker that cannot reach the
    registry for their writer schema: the rebuild stays catching up (before, the
    codec's error failed it); a worker that reaches it goes on from there."""
    rebuild_id = _request(clean_db)
    row = _until(orchestrator, rebuild_id, "catching_up")
    assert row.phase == "catching_up"
    monkeypatch.setenv("GAPLESS_SCHEMA_REGISTRY_URL", registry_url)
    committed = _write(clean_db, 50, "framed-")
    orchestrator.close()  # its worker restarts...

    def restarted(url: str) -> Orchestrator:
        """The same worker again, its codec reaching the registry at ``url``."""
        return Orchestrator(
            clean_db.product_dsn,
            orchestrator.client,
            orchestrator.fetch,
            "worker-a",
            epochs=orchestrator.epochs,
            codec=RegistryCodec(registry_client(url)),
        )

    cut_off = restarted("http://127.0.0.1:1/apis/ccompat/v7")
    try:
        for _ in range(3):  # ...while the registry is away: it waits, every tick
            waited = cut_off.advance(rebuild_id)
            assert waited is not None and waited.phase == "catching_up", waited
    finally:
        cut_off.close()
    back = restarted(registry_url)
    try:
        done = _until(back, rebuild_id, "done")
    finally:
        back.close()
    assert done.phase == "done", (done.error_code, done.error_message)
    with psycopg.connect(clean_db.product_dsn) as conn:
        progress = conn.execute(
            "SELECT position FROM stream_progress WHERE consumer = 'product-applier'"
            " AND tenant_id = %s AND catalog_id = %s",
            (TENANT, CATALOG),
        ).fetchone()
    assert progress is not None and progress[0] == committed
