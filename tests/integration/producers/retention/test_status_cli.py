"""``gapless status`` names what holds retention, per stream."""

from __future__ import annotations

import json

import psycopg
from click.testing import CliRunner

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

    table = CliRunner().invoke(main, ["status"])
    assert table.exit_code == 0, table.output
    assert "retention held: consumer 'laggard'" in table.output
    assert "applied by laggard: 4  lag 8" in table.output
