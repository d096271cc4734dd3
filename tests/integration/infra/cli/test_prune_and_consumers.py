"""``gapless prune`` and ``gapless consumers`` against real PostgreSQL."""

from __future__ import annotations

import json

import psycopg
import pytest
from click.testing import CliRunner

from db.settings import DatabaseSettings
from infra.cli.main import main
from producers.retention import consumers
from tests.integration.producers.retention.streams import ready_stream


def test_prune_once_prints_what_it_deleted_per_stream(
    clean_db: DatabaseSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAPLESS_RETENTION_AGE_SECONDS", "60")
    monkeypatch.setenv("GAPLESS_PRUNE_BATCH_SIZE", "4")
    a = ready_stream(clean_db, n=10, published=10, old=10, catalog="a")
    b = ready_stream(clean_db, n=10, published=10, old=10, catalog="b")
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        consumers.report(conn, b, "slow", 3)

    result = CliRunner().invoke(main, ["prune", "--once", "--json"])
    assert result.exit_code == 0, result.output
    lines = {line["stream"]: line for line in map(json.loads, result.output.splitlines())}
    assert lines[str(a)] == {
        "stream": str(a),
        "deleted": 10,
        "pruned_through": 10,
        "limited_by": "publication",
    }
    assert lines[str(b)]["deleted"] == 3 and lines[str(b)]["limited_by"] == "consumer 'slow' at 3"

    table = CliRunner().invoke(main, ["prune", "--once"])
    assert table.exit_code == 0, table.output
    assert "deleted        0" in table.output and "consumer 'slow' at 3" in table.output


def test_consumers_list_and_deregister(clean_db: DatabaseSettings) -> None:
    stream = ready_stream(clean_db, n=8, published=8, old=8)
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        consumers.report(conn, stream, "fast", 8)
        consumers.register(conn, stream, "silent")

    listed = CliRunner().invoke(main, ["consumers", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {row["consumer"]: row for row in map(json.loads, listed.output.splitlines())}
    assert rows["silent"]["holds_floor"] and rows["silent"]["reported_position"] is None
    assert rows["silent"]["lag"] == 8 and rows["silent"]["held_back"] == 8
    assert not rows["fast"]["holds_floor"] and rows["fast"]["lag"] == 0

    table = CliRunner().invoke(main, ["consumers", "list"])
    assert "holds the floor (8 held back)" in table.output

    args = ["consumers", "deregister", stream.tenant_id, stream.catalog_id, "1", "silent"]
    gone = CliRunner().invoke(main, args)
    assert gone.exit_code == 0, gone.output
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 2
    assert "no consumer 'silent'" in again.output
