"""The rebuild timer's pass (``step_each``) on real services, with two agents workers
(issue 29, defect 3): one rebuild's trouble never holds up another's, nor the
cleanup.

A rebuild whose lease the resolver forgot (its database restored from before the
lease was taken: 404 ``LEASE_NOT_FOUND``) starts over, and once its attempts have run
out and it failed, its cleanup finishes (a lease the resolver does not know pins
nothing). An error escaping one rebuild's step (its export's manifest gone from the
bucket) is counted and the other rebuilds and the cleanup go on. Before the fix the
404 escaped as ``httpx.HTTPStatusError`` and stopped the pass at the first rebuild,
every pass: the second rebuild never moved and the cleanup never ran.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from prometheus_client import REGISTRY
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.objects import s3_client
from db.product import rebuilds as sql
from db.product.rebuilds import RebuildRow
from db.settings import DatabaseSettings
from infra.demo.workload import run_workload
from processors.agents.rebuilds import step_each
from processors.rebuild.orchestrator import Orchestrator
from processors.resolver_client import ResolverClient
from producers.exports.settings import ExportSettings
from schemas.ids import StreamId
from tests.fixtures.resolver_api import RunningApi

TENANT = "x"
CATALOGS = ("c1", "c2", "c3")


@pytest.fixture()
def workers(
    clean_db: DatabaseSettings, resolver_api: RunningApi, services: dict[str, str]
) -> Iterator[tuple[Orchestrator, Orchestrator]]:
    """Two agents workers' orchestrators, fetching export objects as the agents do."""
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    run_workload(pool, epochs, [(TENANT, c) for c in CATALOGS], events=150, writers=2)
    pool.close()
    settings = ExportSettings()
    s3 = s3_client(settings)

    def fetch(key: str) -> bytes:
        body: bytes = s3.get_object(Bucket=settings.exports_bucket, Key=key)["Body"].read()
        return body

    client = ResolverClient(resolver_api.url, resolver_api.token)
    pair = tuple(
        Orchestrator(
            clean_db.product_dsn,
            client,
            fetch,
            worker,
            max_attempts=2,
            epochs=EpochSource(clean_db.control_dsn),
        )
        for worker in ("worker-a", "worker-b")
    )
    yield pair[0], pair[1]
    for orchestrator in pair:
        orchestrator.close()
    client.close()
    epochs.close()


def _request(settings: DatabaseSettings, catalog: str) -> uuid.UUID:
    rebuild_id = uuid.uuid4()
    with psycopg.connect(settings.product_dsn) as conn:
        assert sql.insert(
            conn,
            rebuild_id,
            "product-applier",
            StreamId(TENANT, catalog, 1),
            f"shadow-{catalog}",
            "op",
            "test",
        )
    return rebuild_id


def _row(settings: DatabaseSettings, rebuild_id: uuid.UUID) -> RebuildRow:
    with psycopg.connect(settings.product_dsn) as conn:
        row = sql.get(conn, rebuild_id)
    assert row is not None
    return row


def _passes_until(
    settings: DatabaseSettings,
    pair: tuple[Orchestrator, Orchestrator],
    done: Callable[[], bool],
    timeout: float = 90.0,
) -> int:
    """Timer passes of both workers, in turn, until ``done`` (each rebuild moves one
    phase at most per pass); how many were made."""
    deadline = time.monotonic() + timeout
    passes = 0
    while not done():
        assert time.monotonic() < deadline, f"not done after {passes} passes: {_phases(settings)}"
        worker = pair[passes % 2]
        step_each(settings.product_dsn, worker, worker.client, steps=1)
        passes += 1
        time.sleep(0.02)  # a timer between ticks (an export being written is waited on)
    return passes


def _step_until(
    pair: tuple[Orchestrator, Orchestrator],
    settings: DatabaseSettings,
    rebuild_id: uuid.UUID,
    phase: str,
) -> None:
    """One rebuild moved on alone, a step at a time, to ``phase`` (the others wait), by
    whichever worker holds it."""
    deadline = time.monotonic() + 60
    while _row(settings, rebuild_id).phase != phase:
        assert time.monotonic() < deadline, _phases(settings)
        assert any(worker.advance(rebuild_id) is not None for worker in pair)


def _forget_lease(settings: DatabaseSettings, lease_id: uuid.UUID | None) -> None:
    """The resolver restored from before the lease was taken: no lease, no export."""
    assert lease_id is not None
    with psycopg.connect(settings.resolver_owner_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM snapshot_export WHERE lease_id = %s", (lease_id,))
        assert conn.execute("DELETE FROM rebuild_lease WHERE lease_id = %s", (lease_id,)).rowcount


def _loaded_or_later(row: RebuildRow) -> bool:
    return row.phase in ("catching_up", "cutting_over", "done")


def test_a_forgotten_lease_starts_its_rebuild_over_and_its_cleanup_finishes(
    clean_db: DatabaseSettings, workers: tuple[Orchestrator, Orchestrator]
) -> None:
    forgotten = _request(clean_db, "c1")  # first in every pass
    other = _request(clean_db, "c2")
    _step_until(workers, clean_db, forgotten, "exporting")
    _forget_lease(clean_db, _row(clean_db, forgotten).lease_id)

    # Started over (attempt 2, from requested) rather than failed.
    _passes_until(clean_db, workers, lambda: _row(clean_db, forgotten).attempt == 2)
    again = _row(clean_db, forgotten)
    assert again.error_code in ("LEASE_NOT_FOUND", "EXPORT_NOT_FOUND")

    # Forgotten again: its attempts run out and it fails, while the other rebuild goes
    # on; its lease, which the resolver does not know, counts as released and the
    # cleanup finishes.
    _step_until(workers, clean_db, forgotten, "exporting")
    _forget_lease(clean_db, _row(clean_db, forgotten).lease_id)
    _passes_until(
        clean_db,
        workers,
        lambda: (
            _row(clean_db, forgotten).cleaned_at is not None
            and _loaded_or_later(_row(clean_db, other))
        ),
    )
    failed = _row(clean_db, forgotten)
    assert failed.phase == "failed"
    assert failed.error_code in ("LEASE_NOT_FOUND", "EXPORT_NOT_FOUND")
    with psycopg.connect(clean_db.product_dsn) as conn:
        assert conn.execute(
            "SELECT count(*) FROM stream_progress WHERE consumer = 'shadow-c1'"
        ).fetchone() == (0,)


def test_an_error_escaping_one_rebuild_stops_neither_the_others_nor_the_cleanup(
    clean_db: DatabaseSettings, workers: tuple[Orchestrator, Orchestrator]
) -> None:
    broken = _request(clean_db, "c3")  # first in every pass
    cancelled = _request(clean_db, "c1")
    other = _request(clean_db, "c2")
    _step_until(workers, clean_db, broken, "loading")
    # Its manifest is lost from the bucket: the agents' fetch raises botocore's
    # NoSuchKey, which no step turns into a rebuild error, every pass.
    export = workers[0].client.export(str(_row(clean_db, broken).export_id))
    settings = ExportSettings()
    s3_client(settings).delete_object(Bucket=settings.exports_bucket, Key=export["manifest_key"])
    # A rebuild cancelled with its lease held waits for the cleanup.
    with psycopg.connect(clean_db.product_dsn) as conn:
        assert sql.update(conn, cancelled, "cancelled") is not None
    before = (
        REGISTRY.get_sample_value("gapless_rebuild_step_errors_total", {"code": "NoSuchKey"}) or 0.0
    )

    _passes_until(
        clean_db,
        workers,
        lambda: (
            _loaded_or_later(_row(clean_db, other))
            and _row(clean_db, cancelled).cleaned_at is not None
        ),
    )
    assert _row(clean_db, broken).phase == "loading"
    after = REGISTRY.get_sample_value("gapless_rebuild_step_errors_total", {"code": "NoSuchKey"})
    assert after is not None and after > before


def _phases(settings: DatabaseSettings) -> list[tuple[str, str, int, str | None, bool]]:
    with psycopg.connect(settings.product_dsn) as conn:
        rows = conn.execute(
            "SELECT shadow_consumer, phase, attempt, error_code, cleaned_at IS NOT NULL"
            " FROM rebuild ORDER BY created_at"
        ).fetchall()
    return [(str(s), str(p), int(a), e, bool(c)) for s, p, a, e, c in rows]
