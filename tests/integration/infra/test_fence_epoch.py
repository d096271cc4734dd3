"""``gapless fence-epoch`` against real PostgreSQL and Kafka: the next epoch issued
once, the old stream fenced, the live consumer's old-epoch parked event settled as
``ignored_old_epoch``, a rebuild at the new epoch requested with a derived id; asked
again, nothing more happens and the same request goes out."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from infra.cli.main import main
from infra.fence import rebuild_id_for
from processors.applier.batch import Applier
from producers.resolver.catalog_items import ItemChange
from schemas import control
from schemas.codec import CODEC
from schemas.settings import KafkaSettings
from tests.fixtures.decisions import accept
from tests.integration.processors.applier.test_applier_faults import Partition, on, upsert

TENANT, CATALOG = "applier-faults", "c1"  # the tenant the applier helpers write


@pytest.fixture()
def control_topic(kafka_settings: KafkaSettings, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"test.control.{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": kafka_settings.kafka_bootstrap})
    for future in admin.create_topics([NewTopic(name, 1, 1)]).values():
        future.result(timeout=30)
    monkeypatch.setenv("GAPLESS_CONTROL_TOPIC", name)
    yield name
    for future in admin.delete_topics([name]).values():
        future.result(timeout=30)


def _commands(bootstrap: str, topic: str, count: int) -> list[control.ControlCommand]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4()}"})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    found: list[control.ControlCommand] = []
    for _ in range(30):
        for message in consumer.consume(10, timeout=1):
            value = message.value()
            if message.error() is None and value is not None:
                found.append(control.decode(value))
        if len(found) >= count:
            break
    consumer.close()
    return found


def _fence(*extra: str, exit_code: int = 3) -> dict[str, object]:
    result = CliRunner().invoke(
        main,
        [
            "fence-epoch",
            "--tenant",
            TENANT,
            "--catalog",
            CATALOG,
            "--reason",
            "restored",
            "--json",
            *extra,
        ],
    )
    assert result.exit_code == exit_code, result.output  # 3: paused until the rebuild
    body: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return body


def test_fence_epoch_fences_settles_and_asks_for_a_rebuild_once(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, control_topic: str
) -> None:
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    with UnitOfWork(pool, epochs, CODEC) as uow:
        accept(uow, TENANT, CATALOG, ItemChange(TENANT, CATALOG, "i1", "lamp", "lamp"))
    pool.close()
    applier = Applier(clean_db.product_dsn, epochs, CODEC)
    child = upsert(5, "child", 1, parent=on("never", 1))
    assert applier.apply([Partition().event(child)]).parked == 1
    applier.close()

    first = _fence("--epoch", "1")
    assert (first["epoch"], first["issued_now"]) == (2, True)
    assert first["fenced"] == [{"stream": f"{TENANT}/{CATALOG}@1", "position": 2, "published": 0}]
    assert (first["parked_settled"], first["quarantine_settled"]) == (1, 0)
    expected = rebuild_id_for(TENANT, CATALOG, 2)
    assert first["rebuild_id"] == str(expected)
    with psycopg.connect(clean_db.product_dsn) as conn:
        outcome = conn.execute(
            "SELECT outcome FROM inbox WHERE event_id = %s", (child.event_id,)
        ).fetchone()
        parked = conn.execute("SELECT count(*) FROM parked_event").fetchone()
    assert outcome == ("ignored_old_epoch",) and parked == (0,)

    again = _fence("--epoch", "1")  # after a crash, or by mistake: nothing more
    assert (again["epoch"], again["issued_now"], again["fenced"]) == (2, False, [])
    assert again["rebuild_id"] == str(expected)
    assert first["state"] == again["state"] == "paused"  # no agents here: no rebuild yet
    pause = first["pause"]
    assert isinstance(pause, dict) and pause["changed_now"] is True
    assert again["pause"] == {**pause, "changed_now": False, "seconds": again["pause"]["seconds"]}  # type: ignore[index]
    commands = _commands(kafka_settings.kafka_bootstrap, control_topic, 3)
    assert [(c.kind, c.command_id, c.tenant_id) for c in commands] == [
        ("pause", uuid.UUID(str(pause["pause_id"])), TENANT),  # held by all: not again
        ("rebuild", expected, TENANT),
        ("rebuild", expected, TENANT),  # the same request twice: carried out once
    ]

    wrong = CliRunner().invoke(
        main,
        ["fence-epoch", "--tenant", TENANT, "--catalog", CATALOG, "--reason", "x", "--epoch", "5"],
    )
    assert wrong.exit_code == 2 and "no epoch 5 to fence" in wrong.output
    epochs.close()


def test_fence_all_fences_every_catalog_once_and_a_run_asked_again_changes_nothing(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, control_topic: str
) -> None:
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    for catalog in ("c1", "c2"):
        with UnitOfWork(pool, epochs, CODEC) as uow:
            accept(uow, TENANT, catalog, ItemChange(TENANT, catalog, "i1", "lamp", "lamp"))
    pool.close()
    epochs.close()

    def fence_all(*extra: str) -> tuple[int, dict[str, Any]]:
        result = CliRunner().invoke(main, ["fence-epoch", "--reason", "restored", "--json", *extra])
        lines = result.stdout.strip().splitlines()
        return result.exit_code, json.loads(lines[-1]) if lines else {}

    code, first = fence_all("--all")
    assert code == 3, first  # no agents here: paused until the rebuilds are done
    catalogs = first["catalogs"]
    assert isinstance(catalogs, list)
    assert [
        (c["catalog_id"], c["superseded_epoch"], c["epoch"], c["issued_now"]) for c in catalogs
    ] == [
        ("c1", 1, 2, True),
        ("c2", 1, 2, True),
    ]
    assert all(c["state"] == "paused" for c in catalogs)
    code, again = fence_all("--run", str(first["run_id"]))
    assert code == 3 and again["planned_now"] is False
    assert [(c["epoch"], c["issued_now"], c["fenced"]) for c in again["catalogs"]] == [
        (2, False, []),
        (2, False, []),
    ]
    with psycopg.connect(clean_db.control_dsn) as conn:
        current = conn.execute(
            "SELECT catalog_id, epoch FROM history_epoch WHERE tenant_id = %s ORDER BY 1",
            (TENANT,),
        ).fetchall()
        paused = conn.execute(
            "SELECT count(*) FROM stream_pause WHERE tenant_id = %s AND resumed_at IS NULL",
            (TENANT,),
        ).fetchone()
    assert current == [("c1", 2), ("c2", 2)] and paused == (2,)
    commands = _commands(kafka_settings.kafka_bootstrap, control_topic, 6)
    assert [c.kind for c in commands[:2]] == ["pause", "pause"]
    kinds = sorted((c.kind, c.catalog_id) for c in commands)
    assert (
        kinds
        == [("pause", "c1"), ("pause", "c2")] + [("rebuild", "c1")] * 2 + [("rebuild", "c2")] * 2
    )  # every catalog paused before any was fenced; each rebuild asked twice
    assert {c.command_id for c in commands if c.kind == "rebuild"} == {
        rebuild_id_for(TENANT, "c1", 2),
        rebuild_id_for(TENANT, "c2", 2),
    }

    code, refused = fence_all("--all")  # a new run would fence epoch 2: refused
    assert code == 2, refused
    unknown = CliRunner().invoke(main, ["fence-epoch", "--reason", "x", "--run", str(uuid.uuid4())])
    assert unknown.exit_code == 2 and "no fence run" in unknown.output
    neither = CliRunner().invoke(main, ["fence-epoch", "--reason", "x", "--tenant", TENANT])
    assert neither.exit_code == 2 and "--all" in neither.output


def test_a_fence_whose_rebuild_was_refused_asks_again_with_the_next_id(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, control_topic: str
) -> None:
    from db.product import rebuilds

    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    with UnitOfWork(pool, epochs, CODEC) as uow:
        accept(uow, TENANT, CATALOG, ItemChange(TENANT, CATALOG, "i1", "lamp", "lamp"))
    pool.close()
    epochs.close()
    first = _fence("--epoch", "1")
    assert first["rebuild_id"] == str(rebuild_id_for(TENANT, CATALOG, 2))
    # The agents refused it: an operator's rebuild of the catalog was running then.
    with psycopg.connect(clean_db.product_dsn) as conn:
        rebuilds.record_answer(
            conn, rebuild_id_for(TENANT, CATALOG, 2), "already_rebuilding", "busy", None
        )
        conn.commit()
    again = _fence("--epoch", "1")
    assert again["rebuild_id"] == str(rebuild_id_for(TENANT, CATALOG, 2, 1))
    third = _fence("--epoch", "1")  # not answered yet: the same request again
    assert third["rebuild_id"] == again["rebuild_id"]
    commands = _commands(kafka_settings.kafka_bootstrap, control_topic, 4)
    assert [c.command_id for c in commands if c.kind == "rebuild"] == [
        rebuild_id_for(TENANT, CATALOG, 2),
        rebuild_id_for(TENANT, CATALOG, 2, 1),
        rebuild_id_for(TENANT, CATALOG, 2, 1),
    ]
