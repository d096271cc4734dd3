"""Rebuild requests through the real control topic: `gapless rebuild` publishes one,
an agent records it once however often it is delivered, a second request for the
same catalog is answered with the running one, and a cancel stops it."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid

import psycopg
from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition

from db.control.epochs import ensure_epoch
from db.product import rebuilds as sql
from db.settings import DatabaseSettings
from infra.cli.main import main
from processors.rebuild.requests import accept
from schemas import control
from schemas.control import ControlCommand
from schemas.settings import KafkaSettings
from schemas.topics import CONTROL_TOPIC


def _read(kafka: KafkaSettings, wanted: set[uuid.UUID]) -> list[ControlCommand]:
    """The commands named by ``wanted`` from the control topic (others are other tests')."""
    consumer = Consumer(
        {
            "bootstrap.servers": kafka.kafka_bootstrap,
            "group.id": f"test-{uuid.uuid4()}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(CONTROL_TOPIC, 0, 0)])
    found: list[ControlCommand] = []
    deadline = time.monotonic() + 30
    while {c.command_id for c in found} != wanted:
        assert time.monotonic() < deadline, f"only {len(found)} of {len(wanted)} arrived"
        for message in consumer.consume(100, timeout=1):
            assert message.error() is None
            command = control.decode(message.value())
            if command.command_id in wanted:
                found.append(command)
    consumer.close()
    return found


def test_a_request_is_recorded_once_and_a_second_one_is_answered_with_it(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings
) -> None:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, "t1", "c1")
    cli = CliRunner()
    first = cli.invoke(
        main, ["rebuild", "--tenant", "t1", "--catalog", "c1", "--reason", "drill", "--json"]
    )
    second = cli.invoke(main, ["rebuild", "--tenant", "t1", "--catalog", "c1", "--json"])
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    ids = [uuid.UUID(json.loads(r.stdout)["rebuild_id"]) for r in (first, second)]
    commands = {c.command_id: c for c in _read(kafka_settings, set(ids))}
    one, other = commands[ids[0]], commands[ids[1]]
    assert (one.kind, one.tenant_id, one.catalog_id, one.reason) == ("rebuild", "t1", "c1", "drill")

    def epoch(_t: str, _c: str) -> int | None:
        return 1

    started = accept(clean_db.product_dsn, one, "product-applier", epoch)
    again = accept(clean_db.product_dsn, one, "product-applier", epoch)  # delivered twice
    busy = accept(clean_db.product_dsn, other, "product-applier", epoch)
    assert (started.status, again.status, busy.status) == (
        "started",
        "already_recorded",
        "already_rebuilding",
    )
    assert busy.row is not None and busy.row.rebuild_id == ids[0]
    with psycopg.connect(clean_db.product_dsn) as conn:
        rows = sql.recent(conn)
    assert [(r.rebuild_id, r.phase, r.reason) for r in rows] == [(ids[0], "requested", "drill")]

    status = cli.invoke(main, ["rebuild", "status", str(ids[0]), "--json"])
    assert status.exit_code == 0, status.output
    assert json.loads(status.stdout)["phase"] == "requested"

    cancel = cli.invoke(main, ["rebuild", "cancel", str(ids[0]), "--reason", "not now"])
    assert cancel.exit_code == 0, cancel.output
    [cancelling] = [c for c in _read_cancels(kafka_settings, ids[0]) if c.kind == "cancel"]
    done = accept(clean_db.product_dsn, cancelling, "product-applier", epoch)
    assert done.status == "cancelled" and done.row is not None
    assert done.row.phase == "cancelled" and "not now" in (done.row.error_message or "")
    # The refused request delivered again, now that the catalog is free, keeps its
    # answer (a late redelivery must not start what its first delivery did not) …
    late = accept(clean_db.product_dsn, other, "product-applier", epoch)
    assert (late.status, late.message) == ("already_rebuilding", busy.message)
    # … while a new request starts.
    fresh = dataclasses.replace(other, command_id=uuid.uuid4())
    assert accept(clean_db.product_dsn, fresh, "product-applier", epoch).status == "started"
    with psycopg.connect(clean_db.product_dsn) as conn:
        assert {r.rebuild_id for r in sql.recent(conn)} == {ids[0], fresh.command_id}


def _read_cancels(kafka: KafkaSettings, rebuild_id: uuid.UUID) -> list[ControlCommand]:
    consumer = Consumer(
        {"bootstrap.servers": kafka.kafka_bootstrap, "group.id": f"test-{uuid.uuid4()}"}
    )
    consumer.assign([TopicPartition(CONTROL_TOPIC, 0, 0)])
    deadline = time.monotonic() + 30
    try:
        while True:
            assert time.monotonic() < deadline, "the cancel never arrived"
            for message in consumer.consume(100, timeout=1):
                command = control.decode(message.value())
                if command.kind == "cancel" and command.rebuild_id == rebuild_id:
                    return [command]
    finally:
        consumer.close()


def test_status_of_an_unknown_rebuild_says_so(clean_db: DatabaseSettings) -> None:
    result = CliRunner().invoke(main, ["rebuild", "status", str(uuid.uuid4())])
    assert result.exit_code == 2 and "no rebuild" in result.output
