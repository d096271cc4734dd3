"""``gapless fence-epoch`` against real PostgreSQL and Kafka: the next epoch issued
once, the old stream fenced, the live consumer's old-epoch parked event settled as
``ignored_old_epoch``, a rebuild at the new epoch requested with a derived id; asked
again, nothing more happens and the same request goes out."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from click.testing import CliRunner
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from psycopg_pool import ConnectionPool

from db.epochs import EpochSource
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
from tests.integration.processors.test_applier_faults import Partition, on, upsert

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
    commands = _commands(kafka_settings.kafka_bootstrap, control_topic, 4)
    assert [(c.kind, c.command_id, c.tenant_id) for c in commands] == [
        ("pause", uuid.UUID(str(pause["pause_id"])), TENANT),
        ("rebuild", expected, TENANT),
    ] * 2  # the same requests twice: the agents carry a rebuild out once

    wrong = CliRunner().invoke(
        main,
        ["fence-epoch", "--tenant", TENANT, "--catalog", CATALOG, "--reason", "x", "--epoch", "5"],
    )
    assert wrong.exit_code == 2 and "no epoch 5 to fence" in wrong.output
    epochs.close()
