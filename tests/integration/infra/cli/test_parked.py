"""``gapless parked`` and ``gapless quarantine`` skip: readable lines, JSON, and
refusals with stable codes, against real PostgreSQL."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from click.testing import CliRunner

from db.control.epochs import EpochSource, ensure_epoch
from db.settings import DatabaseSettings
from infra.cli.main import main
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from processors.applier.repair import list_entries
from schemas.codec import CODEC
from schemas.registry_codec import CONFLUENT_MAGIC, codec_for
from schemas.settings import SchemaRegistrySettings
from schemas.topics import EVENTS_TOPIC
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


def test_parked_events_are_listed_retried_and_skipped_from_the_command_line(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    partition = Partition()
    child = upsert(2, "child", 1, parent=on("parent", 1))
    grandchild = upsert(3, "grandchild", 1, parent=on("child", 1))
    applier.apply([partition.event(child), partition.event(grandchild)])
    cli = CliRunner()

    assert cli.invoke(main, ["parked", "--help"]).exit_code == 0
    listed = cli.invoke(main, ["parked", "list", "--json", "--stream", f"{TENANT}/c1/1"])
    assert listed.exit_code == 0, listed.output
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["event_id"], r["position"]) for r in rows] == [
        (str(child.event_id), 2),
        (str(grandchild.event_id), 3),
    ]
    assert rows[0]["waits_on"] == [
        {
            "aggregate_type": "catalog_item",
            "aggregate_id": "parent",
            "revision": 1,
            "applied_revision": None,
        }
    ]
    table = cli.invoke(main, ["parked", "list"])
    assert f"{TENANT}/c1/1#2" in table.stdout
    assert "waits on: catalog_item parent@1 (never applied)" in table.stdout
    old = cli.invoke(main, ["parked", "list", "--older-than", "1h"])
    assert (old.exit_code, old.stdout, "no parked events" in old.stderr) == (0, "", True)
    assert cli.invoke(main, ["parked", "list", "--older-than", "soon"]).exit_code == 2
    assert cli.invoke(main, ["parked", "list", "--stream", "t/c"]).exit_code == 2

    waiting = cli.invoke(main, ["parked", "retry", str(child.event_id), "--json"])
    assert waiting.exit_code == 1
    assert json.loads(waiting.stdout) == {"event_id": str(child.event_id), "outcome": "parked"}
    unknown = uuid.uuid4()
    refused = cli.invoke(main, ["parked", "skip", str(unknown), "--reason", "x", "--json"])
    assert refused.exit_code == 2
    assert json.loads(refused.stdout)["error"] == "PARKED_EVENT_NOT_FOUND"
    assert cli.invoke(main, ["parked", "skip", "not-a-uuid", "--reason", "x"]).exit_code == 2
    no_reason = cli.invoke(main, ["parked", "skip", str(child.event_id), "--reason", " "])
    assert no_reason.exit_code == 2 and "SKIP_REASON_REQUIRED" in no_reason.stderr

    skipped = cli.invoke(
        main, ["parked", "skip", str(child.event_id), "--reason", "parent withdrawn", "--json"]
    )
    assert skipped.exit_code == 0, skipped.output
    body = json.loads(skipped.stdout)
    assert body["progress"] == 0  # position 1 never arrived
    with psycopg.connect(clean_db.product_dsn) as conn:
        [dependant] = list_entries(conn)
    assert body["set_aside"] == {str(grandchild.event_id): dependant.id}
    assert dependant.error_code == "DEPENDENCY_SKIPPED"

    text = cli.invoke(main, ["quarantine", "skip", str(dependant.id), "--reason", "gone too"])
    assert text.exit_code == 0, text.output
    assert f"#{dependant.id}: skipped; stream progress now 0" in text.stderr
    again = cli.invoke(main, ["quarantine", "skip", str(dependant.id), "--reason", "x", "--json"])
    assert again.exit_code == 2
    assert json.loads(again.stdout)["error"] == "QUARANTINE_ENTRY_NOT_OPEN"
    assert cli.invoke(main, ["parked", "list", "--json"]).stdout == ""


def test_a_skip_reads_the_confluent_framing_when_a_registry_is_configured(
    clean_db: DatabaseSettings, registry_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The skip decodes the given-up event to learn the revision it gives up, so what
    waits on it is set aside; with the registry's framing that needs the codec the
    settings choose (read with the single-object codec, the event looks undecodable
    and its dependant would wait for ever)."""
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, TENANT, "c1")
    monkeypatch.setenv("GAPLESS_SCHEMA_REGISTRY_URL", registry_url)
    codec = codec_for(SchemaRegistrySettings())
    epochs = EpochSource(clean_db.control_dsn, ttl_seconds=0)
    applier = Applier(clean_db.product_dsn, epochs, codec)
    child = upsert(2, "child", 1, parent=on("parent", 1))
    grandchild = upsert(3, "grandchild", 1, parent=on("child", 1))
    framed = [
        RawMessage(EVENTS_TOPIC, 0, offset, codec.encode_key(e.key), codec.encode_value(e))
        for offset, e in enumerate((child, grandchild))
    ]
    assert {m.value[:1] for m in framed if m.value} == {CONFLUENT_MAGIC}
    try:
        applier.apply(framed)
    finally:
        applier.close()
        epochs.close()

    skipped = CliRunner().invoke(
        main, ["parked", "skip", str(child.event_id), "--reason", "parent withdrawn", "--json"]
    )
    assert skipped.exit_code == 0, skipped.output
    with psycopg.connect(clean_db.product_dsn) as conn:
        [dependant] = list_entries(conn)
    assert json.loads(skipped.stdout)["set_aside"] == {str(grandchild.event_id): dependant.id}
    assert dependant.error_code == "DEPENDENCY_SKIPPED"
