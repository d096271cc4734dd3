"""A restore nobody fenced, against real PostgreSQL and Kafka: a consumer's report above
the committed cursor flags the stream rewound; its writes are then refused
(``HISTORY_REWOUND``, naming the fence) at the Unit of Work and over HTTP; ``gapless
status`` and ``/metrics`` show it with the command that fixes it; ``gapless
fence-epoch`` clears it and writes go on at the new epoch. Then the issue's own
scenario: back the resolver up (``pg_dump``), apply more, restore it in place and
keep writing: the reused positions are caught at the applier and writes stop."""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from fastapi.testclient import TestClient
from psycopg_pool import ConnectionPool
from pydantic import SecretStr

from db.control.epochs import (
    POSITION_REUSED,
    REPORT_BEYOND_COMMITTED,
    EpochSource,
    fence_command,
    rewound_now,
)
from db.exceptions import HistoryRewound
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from infra.cli.main import main
from infra.drill.backup import pg_tool as _pg
from infra.drill.backup import restore_in_place as _restore_in_place
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from processors.applier.rewound import STREAM_REWOUND
from producers.api import create_app
from producers.resolver.review_cases import open_case
from producers.settings import ApiSettings
from schemas.codec import CODEC
from schemas.http.auth import token_hash
from schemas.ids import StreamId
from schemas.settings import KafkaSettings
from tests.integration.producers.resolver.test_routes import decision
from tests.integration.producers.retention.streams import write_events

TOKEN = "token-of-tenant-t1"
DECIDE = "/v1/tenants/t1/catalogs/c1/review-cases/case-1/decisions"
FENCE = ["fence-epoch", "--tenant", "t1", "--catalog", "c1", "--epoch", "1", "--reason", "restore"]


@pytest.fixture()
def control_topic(kafka_settings: KafkaSettings, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The fence's rebuild request goes to a topic of this test's own."""
    name = f"test.control.{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": kafka_settings.kafka_bootstrap})
    for future in admin.create_topics([NewTopic(name, 1, 1)]).values():
        future.result(timeout=30)
    monkeypatch.setenv("GAPLESS_CONTROL_TOPIC", name)
    yield name
    for future in admin.delete_topics([name]).values():
        future.result(timeout=30)


def api(settings: DatabaseSettings) -> TestClient:
    app = create_app(
        ApiSettings(
            api_tokens=SecretStr(f"{token_hash(TOKEN)}:t1"),
            resolver_dsn=settings.resolver_dsn,
            control_dsn=settings.control_dsn,
        )
    )
    return TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})


def flags(settings: DatabaseSettings) -> list[tuple[str, int, str]]:
    with psycopg.connect(settings.control_dsn) as conn:
        return [
            (f"{r.tenant_id}/{r.catalog_id}", r.history_epoch, r.signal) for r in rewound_now(conn)
        ]


def status() -> dict[str, Any]:
    result = CliRunner().invoke(main, ["status", "--json"])
    assert result.exit_code == 0, result.output
    body: dict[str, Any] = json.loads(result.output)
    assert body["error"] is None
    return body


def rewound_series(client: TestClient) -> list[str]:
    text = client.get("/metrics").text
    assert "gapless_stream_rewound_report_up 1.0" in text
    return [line for line in text.splitlines() if line.startswith("gapless_stream_rewound{")]


def cursor(settings: DatabaseSettings, epoch: int = 1) -> int:
    with psycopg.connect(settings.resolver_dsn) as conn:
        row = conn.execute(
            "SELECT position FROM stream_cursor WHERE tenant_id = 't1' AND catalog_id = 'c1'"
            " AND history_epoch = %s",
            (epoch,),
        ).fetchone()
    return int(row[0]) if row else 0


def report(client: TestClient, epoch: int, position: int) -> dict[str, Any]:
    answer = client.post(
        f"/v1/streams/t1/c1/{epoch}/consumers/product-applier/progress",
        json={"position": position},
    )
    assert answer.status_code == 409, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_a_report_beyond_the_committed_cursor_holds_the_stream_until_it_is_fenced(
    clean_db: DatabaseSettings, control_topic: str
) -> None:
    write_events(clean_db, "t1", "c1", 5)
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=1, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    try:
        with UnitOfWork(pool, epochs, CODEC) as uow:
            open_case(uow, "t1", "c1", "case-1", "listing", "L1")
            uow.commit()
    finally:
        pool.close()
        epochs.close()
    committed = cursor(clean_db)
    fix = fence_command("t1", "c1", 1)
    assert fix == "gapless fence-epoch --tenant t1 --catalog c1 --epoch 1" + (
        " --reason 'unfenced restore' --wait"
    )

    with api(clean_db) as client:
        assert rewound_series(client) == []
        refused = report(client, 1, committed + 4)
        assert refused["code"] == "POSITION_BEYOND_COMMITTED" and fix in refused["message"]
        assert flags(clean_db) == [("t1/c1", 1, REPORT_BEYOND_COMMITTED)]

        # Every write of the stream is refused now, with the fix in the message.
        answer = client.post(DECIDE, json=decision())
        assert answer.status_code == 409, answer.text
        assert answer.json()["code"] == "HISTORY_REWOUND" and fix in answer.json()["message"]
        with pytest.raises(HistoryRewound, match="fence-epoch --tenant t1"):
            write_events(clean_db, "t1", "c1", 2)
        assert cursor(clean_db) == committed
        assert rewound_series(client) == [
            'gapless_stream_rewound{catalog="c1",epoch="1",signal="report_beyond_committed",'
            'tenant="t1"} 1.0'
        ]

    [flag] = status()["rewound"]
    assert (flag["tenant_id"], flag["catalog_id"], flag["history_epoch"]) == ("t1", "c1", 1)
    assert flag["signal"] == REPORT_BEYOND_COMMITTED and flag["fix"] == fix
    table = CliRunner().invoke(main, ["status"])
    assert "REWOUND t1/c1@1" in table.output and f"fix: {fix}" in table.output

    fenced = CliRunner().invoke(main, FENCE)
    assert fenced.exit_code == 3, fenced.output  # paused until its rebuild (no agents here)
    assert "REWOUND flag cleared (1)" in fenced.output
    assert flags(clean_db) == [] and status()["rewound"] == []
    with psycopg.connect(clean_db.control_dsn) as conn:
        cleared = conn.execute("SELECT cleared_by, cleared_at IS NOT NULL FROM rewound_stream")
        assert [by is not None and at for by, at in cleared.fetchall()] == [True]

    # Writes go to the new epoch's stream, from position 1.
    assert write_events(clean_db, "t1", "c1", 2) == StreamId("t1", "c1", 2)
    assert cursor(clean_db, 2) == 2
    with api(clean_db) as client:
        assert rewound_series(client) == []
        # A late report on the fenced epoch is refused, and flags nothing any more.
        late = report(client, 1, committed + 40)
        assert late["code"] == "POSITION_BEYOND_COMMITTED" and "fence-epoch" not in late["message"]
    assert flags(clean_db) == []


def outbox_messages(settings: DatabaseSettings, after: int) -> list[RawMessage]:
    """The stream's outbox rows after ``after``, as the relay would put them in Kafka."""
    with psycopg.connect(settings.resolver_dsn) as conn:
        rows = conn.execute(
            "SELECT position, key, value FROM outbox WHERE tenant_id = 't1'"
            " AND catalog_id = 'c1' AND history_epoch = 1 AND position > %s ORDER BY position",
            (after,),
        ).fetchall()
    return [RawMessage("events", 0, 1000 * after + p, bytes(k), bytes(v)) for p, k, v in rows]


def test_an_unfenced_restore_in_place_is_caught_and_its_writes_stop(
    clean_db: DatabaseSettings,
) -> None:
    epochs = EpochSource(clean_db.control_dsn, ttl_seconds=0)
    applier = Applier(clean_db.product_dsn, epochs, CODEC)
    try:
        # The history so far, applied; then a backup of the resolver.
        write_events(clean_db, "t1", "c1", 4)
        assert applier.apply(outbox_messages(clean_db, 0)).applied == 4
        backup = Path(tempfile.mkdtemp(prefix="gapless-rewound-")) / "resolver.dump"
        _pg("pg_dump", clean_db.resolver_owner_dsn, "-Fc", "-f", str(backup))

        # More is written and applied after the backup.
        write_events(clean_db, "t1", "c1", 3)
        lost = outbox_messages(clean_db, 4)
        assert applier.apply(lost).applied == 3

        # The backup is restored in place; nobody fences, the writers go on: the
        # resolver hands out positions 5-7 again, under other event ids.
        _restore_in_place(clean_db.resolver_owner_dsn, backup)
        assert cursor(clean_db) == 4
        write_events(clean_db, "t1", "c1", 3)
        reused = outbox_messages(clean_db, 4)
        assert [CODEC.decode_value(m.value or b"").position for m in reused] == [5, 6, 7]

        result = applier.apply(reused)
        assert (result.applied, result.duplicates, result.quarantined) == (0, 0, 3)
        assert flags(clean_db) == [("t1/c1", 1, POSITION_REUSED)]
        with psycopg.connect(clean_db.product_dsn) as conn:
            held = conn.execute(
                "SELECT position, error_code FROM quarantine WHERE status = 'open'"
                " ORDER BY position"
            ).fetchall()
            progress = conn.execute("SELECT position FROM stream_progress").fetchall()
        assert held == [(5, STREAM_REWOUND), (6, STREAM_REWOUND), (7, STREAM_REWOUND)]
        assert progress == [(7,)]

        # The resolver refuses the stream's writes from now on.
        with pytest.raises(HistoryRewound, match="position_reused"):
            write_events(clean_db, "t1", "c1", 1)
        assert cursor(clean_db) == 7
    finally:
        applier.close()
        epochs.close()
