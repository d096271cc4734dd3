"""``gapless status`` names what holds retention, per stream."""

from __future__ import annotations

import json
import uuid

import psycopg
from click.testing import CliRunner
from psycopg.types.json import Jsonb

from db.product import rebuilds as sql
from db.settings import DatabaseSettings
from infra.cli.main import main
from producers.retention import consumers
from tests.integration.producers.retention.streams import ready_stream


def test_status_names_the_lagging_consumer_and_the_product_progress(
    clean_db: DatabaseSettings,
) -> None:
    stream = ready_stream(clean_db, n=12, published=12, old=12)
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        consumers.report(conn, stream, "laggard", 4)
        consumers.report(conn, stream, "prompt", 12)
    with psycopg.connect(clean_db.product_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO stream_progress (consumer, tenant_id, catalog_id, history_epoch,"
            " position) VALUES ('laggard', %s, %s, %s, 4)",
            (stream.tenant_id, stream.catalog_id, stream.history_epoch),
        )

    result = CliRunner().invoke(main, ["status", "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["error"] is None
    [mine] = [s for s in body["streams"] if s["tenant_id"] == stream.tenant_id]
    retention = mine["retention"]
    assert retention["committed"] == 12 and retention["floor"] == 4
    assert "laggard" in retention["blocker"]
    assert mine["consumers"] == [
        {"consumer": "laggard", "progress": 4, "lag": 8, "parked": 0, "quarantined": 0}
    ]
    # The same lag in time: its oldest unapplied event (5) was committed an hour ago;
    # its progress moved just now. The prompt consumer has nothing waiting.
    reported = {c["consumer_id"]: c for c in retention["consumers"]}
    assert 3600 <= reported["laggard"]["waiting_age_s"] < 3700
    assert 0 <= reported["laggard"]["unchanged_s"] < 60
    assert (reported["prompt"]["waiting_age_s"], reported["prompt"]["unchanged_s"]) == (None, None)
    assert retention["unpublished_age_s"] is None  # every row published

    table = CliRunner().invoke(main, ["status"])
    assert table.exit_code == 0, table.output
    assert "retention held: consumer 'laggard'" in table.output
    assert "applied by laggard: 4  lag 8" in table.output
    assert "reported by laggard: 4  lag 8 (oldest unapplied 1h00m old, unchanged for" in (
        table.output
    )


def test_status_shows_a_rebuild_in_progress_and_a_failed_one(clean_db: DatabaseSettings) -> None:
    stream = ready_stream(clean_db, n=3, published=3, old=0)
    running, failed = uuid.uuid4(), uuid.uuid4()
    with psycopg.connect(clean_db.product_dsn) as conn:
        sql.insert(conn, running, "product-applier", stream, "shadow-a", "op", "drill")
        sql.update(
            conn,
            running,
            "loading",
            chunks_total=4,
            chunks_loaded=1,
            loaded_chunks=[1],
            rows_loaded=100,
            rows_total=400,
            rows_by_kind=Jsonb({"listing_mapping": 400}),
            load_cost=Jsonb({"listing_mapping": {"rows": 100, "seconds": 2.0}}),
        )
        sql.insert(conn, failed, "analytics", stream, "shadow-b", "op", "")
        sql.update(conn, failed, "failed", error_code="EXPORT_CORRUPT", error_message="bad")
    body = json.loads(CliRunner().invoke(main, ["status", "--json"]).output)
    [mine] = [s for s in body["streams"] if s["tenant_id"] == stream.tenant_id]
    assert [(r["rebuild_id"], r["phase"], r["error_code"]) for r in mine["rebuilds"]] == [
        (str(running), "loading", None),
        (str(failed), "failed", "EXPORT_CORRUPT"),
    ]
    # Its progress as `gapless rebuild status` shows it: 100 of 400 rows at 50 rows/s.
    [shown, _] = mine["rebuilds"]
    assert shown["progress_fraction"] == 0.25
    assert shown["rate_rows_per_s"] == 50.0
    assert shown["eta_s"] is not None and 0 <= shown["eta_s"] <= 6.0
    table = CliRunner().invoke(main, ["status"]).output
    assert (
        f"rebuild {running} of product-applier: loading, rows 100 / 400 (25 %), 50 rows/s, ETA"
        in table
    )
    assert "attempt 1  loaded 1/4" in table
    assert f"rebuild {failed} of analytics: failed" in table and "EXPORT_CORRUPT" in table
