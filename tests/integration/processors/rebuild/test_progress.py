"""A rebuild's progress followed through its phases against the real resolver API,
PostgreSQL and S3: once its export is known the row holds ``rows_total``; while it
loads, the share of the work done moves from 0 towards 1 with a rate and an ETA
(after its first chunk), ``gapless rebuild status --json`` carries them and each
``--wait`` line shows them; the cutover ends it at 1."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import psycopg
import pytest
from click.testing import CliRunner
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.product import rebuilds as sql
from db.settings import DatabaseSettings
from infra.cli.main import main
from infra.cli.rebuild import StatusWatch, follow_rebuild
from infra.demo.workload import run_workload
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from processors.gaps import retained_topic
from processors.rebuild.orchestrator import Orchestrator
from processors.rebuild.progress import Progress, estimate
from processors.resolver_client import ResolverClient
from producers.exports.settings import ExportSettings
from producers.exports.store import ExportStore
from schemas.codec import CODEC
from schemas.ids import StreamId
from schemas.settings import KafkaSettings
from tests.fixtures.resolver_api import RunningApi

TENANT, CATALOG = "x", "catalog1"
STREAM = StreamId(TENANT, CATALOG, 1)
LIVE = "product-applier"
KEYS = ("rows_total", "progress_fraction", "rate_rows_per_s", "eta_s")


@dataclass
class Seen:
    """What was read of the rebuild before each chunk was fetched."""

    rows: list[sql.RebuildRow] = field(default_factory=list)
    progress: list[Progress] = field(default_factory=list)
    status: list[dict[str, object]] = field(default_factory=list)
    wait_lines: list[str] = field(default_factory=list)


@pytest.fixture()
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Exports cut into chunks of 40 records, so a small catalog loads in several."""
    monkeypatch.setenv("GAPLESS_EXPORT_CHUNK_RECORDS", "40")


@pytest.fixture()
def live_catalog(
    small_chunks: None,
    clean_db: DatabaseSettings,
    resolver_api: RunningApi,
    services: dict[str, str],
) -> Iterator[ResolverClient]:
    """A catalog's history, and the live consumer's progress through all of it."""
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    run_workload(pool, epochs, [(TENANT, CATALOG)], events=300, writers=2)
    client = ResolverClient(resolver_api.url, resolver_api.token)
    live = Applier(clean_db.product_dsn, EpochSource(clean_db.control_dsn), CODEC, LIVE)
    after = 0
    while page := client.retained_events(STREAM, after, 500).events:
        origin = retained_topic(STREAM)
        live.apply(
            [RawMessage(origin, -1, e.position, e.key, e.value, STREAM, e.position) for e in page]
        )
        after = page[-1].position
    live.close()
    yield client
    client.close()
    pool.close()
    epochs.close()


def test_a_rebuild_shows_rows_total_a_fraction_from_0_to_1_and_an_eta_while_loading(
    clean_db: DatabaseSettings,
    live_catalog: ResolverClient,
    kafka_settings: KafkaSettings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    rebuild_id = uuid.uuid4()
    store = ExportStore.from_settings(ExportSettings())
    seen = Seen()
    cli = CliRunner()

    def look() -> None:
        with psycopg.connect(clean_db.product_dsn) as conn:
            row = sql.get(conn, rebuild_id)
        assert row is not None
        seen.rows.append(row)
        seen.progress.append(estimate(row, datetime.now(UTC)))
        status = cli.invoke(main, ["rebuild", "status", str(rebuild_id), "--json"])
        assert status.exit_code == 0, status.output
        seen.status.append(json.loads(status.output))

    def fetch(key: str) -> bytes:
        if "/chunk-" in key:
            look()
            if not seen.wait_lines:
                # ``gapless rebuild --wait``'s line, followed for no time: one line, exit 4
                capsys.readouterr()
                assert follow_rebuild(rebuild_id, StatusWatch(), 0, False) == 4
                seen.wait_lines.append(capsys.readouterr().err)
        return store.get(key)

    orchestrator = Orchestrator(
        clean_db.product_dsn,
        live_catalog,
        fetch,
        "worker-a",
        epochs=EpochSource(clean_db.control_dsn),
        page_size=100,
    )
    with psycopg.connect(clean_db.product_dsn) as conn:
        assert sql.insert(conn, rebuild_id, LIVE, STREAM, "shadow-p", "op", "t")
    phases: list[str] = []
    deadline = time.monotonic() + 120
    while not phases or phases[-1] not in ("done", "failed"):
        row = orchestrator.advance(rebuild_id)
        assert row is not None
        if not phases or phases[-1] != row.phase:
            phases.append(row.phase)
            if row.phase != "loading":  # looked at before each chunk
                look()
        assert time.monotonic() < deadline, phases
    orchestrator.close()
    assert phases[-1] == "done", phases

    final = seen.rows[-1]
    assert final.rows_total is not None and final.rows_total == final.rows_loaded > 0
    loading = [
        (r, p) for r, p in zip(seen.rows, seen.progress, strict=True) if r.phase == "loading"
    ]
    assert len(loading) >= 4, "several chunks loaded"
    # rows_total is known from the first chunk on; nothing measured yet, no ETA
    assert all(r.rows_total == final.rows_total for r, _ in loading)
    first_row, first = loading[0]
    assert (first_row.rows_loaded, first.fraction, first.eta_s) == (0, 0.0, None)
    # then a rate and an ETA at each chunk, and the fraction moving towards 1
    later = [p for _, p in loading[1:]]
    assert all(p.eta_s is not None for p in later) and later[0].eta_s
    assert all(p.rate_rows_s is not None and p.rate_rows_s > 0 for p in later)
    fractions = [p.fraction for p in later]
    assert 0.0 < fractions[0] < fractions[-1] < 1.0
    assert seen.progress[-1].fraction == 1.0  # done
    assert {p.fraction for p in seen.progress[: phases.index("loading")]} <= {0.0}

    for status in seen.status:
        assert set(KEYS) <= status.keys()
    mid = seen.status[len(seen.status) // 2]
    assert mid["rows_total"] == final.rows_total and mid["eta_s"] is not None
    (line,) = seen.wait_lines
    assert f"loading, rows 0 / {final.rows_total:,} (0 %)" in line, line
