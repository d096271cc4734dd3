"""The agents' product metrics (``processors/agents/metrics.py``): parked events and
open quarantine entries per consumer and stream, read from a real product database;
a rebuild's progress, rate and ETA while it runs; and ``gapless_product_report_up`` 0
when the database does not answer."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from psycopg.types.json import Jsonb

from db.control.epochs import EpochSource, ensure_epoch
from db.product import rebuilds as sql
from db.settings import DatabaseSettings
from processors.agents.metrics import ProductCollector
from processors.applier.batch import Applier
from schemas.codec import CODEC
from schemas.ids import StreamId
from tests.integration.processors.applier.test_applier_faults import TENANT, Partition, on, upsert


@pytest.fixture()
def applier(clean_db: DatabaseSettings) -> Iterator[Applier]:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, TENANT, "c1")
    epochs = EpochSource(clean_db.control_dsn, ttl_seconds=0)
    applier = Applier(clean_db.product_dsn, epochs, CODEC)
    yield applier
    applier.close()
    epochs.close()


def _scrape(dsn: str) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProductCollector(dsn))
    return generate_latest(registry).decode()


def test_parked_and_quarantined_counts_per_consumer_and_stream(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    partition = Partition()
    child = upsert(2, "child", 1, parent=on("parent", 1))
    grandchild = upsert(3, "grandchild", 1, parent=on("child", 1))
    applier.apply(
        [
            partition.event(child),
            partition.event(grandchild),
            partition.message(b"definitely not avro"),
        ]
    )
    text = _scrape(clean_db.product_dsn)
    assert "gapless_product_report_up 1.0" in text
    stream = f'catalog="c1",consumer="product-applier",epoch="1",tenant="{TENANT}"'
    assert f"gapless_applier_parked_events{{{stream}}} 2.0" in text
    undecodable = 'catalog="",consumer="product-applier",epoch="",tenant=""'
    assert f"gapless_applier_quarantine_open{{{undecodable}}} 1.0" in text
    # No rebuild is running: the families are there, without series.
    assert "# TYPE gapless_rebuild_chunks_loaded gauge" in text
    assert "gapless_rebuild_chunks_loaded{" not in text


def test_an_unreachable_database_reports_down() -> None:
    text = _scrape("postgresql://nobody@127.0.0.1:1/product")
    assert "gapless_product_report_up 0.0" in text
    assert "gapless_applier_parked_events" not in text


def test_a_rebuilds_progress_rate_and_eta_while_it_runs_and_gone_once_it_ends(
    clean_db: DatabaseSettings,
) -> None:
    rebuild_id = uuid.uuid4()
    stream = StreamId(TENANT, "c1", 1)
    with psycopg.connect(clean_db.product_dsn) as conn:
        sql.insert(conn, rebuild_id, "product-applier", stream, "shadow", "test", "")
        sql.update(conn, rebuild_id, "exporting")
    labels = f'catalog="c1",consumer="product-applier",tenant="{TENANT}"'
    text = _scrape(clean_db.product_dsn)
    assert f"gapless_rebuild_progress_ratio{{{labels}}} 0.0" in text
    assert f"gapless_rebuild_eta_seconds{{{labels}}}" not in text  # not known yet

    with psycopg.connect(clean_db.product_dsn) as conn:
        sql.update(
            conn,
            rebuild_id,
            "loading",
            export_position=0,
            rows_total=400,
            rows_loaded=100,
            rows_by_kind=Jsonb({"listing_mapping": 400}),
            load_cost=Jsonb({"listing_mapping": {"rows": 100, "seconds": 2.0}}),
        )
    text = _scrape(clean_db.product_dsn)
    assert f"gapless_rebuild_progress_ratio{{{labels}}} 0.25" in text
    assert f"gapless_rebuild_rate_rows_per_second{{{labels}}} 50.0" in text
    eta = [line for line in text.splitlines() if line.startswith("gapless_rebuild_eta_seconds{")]
    assert len(eta) == 1 and 5.0 < float(eta[0].split()[-1]) <= 6.0  # 300 rows at 50/s

    with psycopg.connect(clean_db.product_dsn) as conn:
        sql.update(conn, rebuild_id, "cancelled")
    text = _scrape(clean_db.product_dsn)
    assert "# TYPE gapless_rebuild_progress_ratio gauge" in text
    for family in ("progress_ratio", "rate_rows_per_second", "eta_seconds"):
        assert f"gapless_rebuild_{family}{{" not in text
