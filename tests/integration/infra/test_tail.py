"""``gapless tail`` reads real Kafka: each ``--from`` form, each filter, the table and
JSON lines, the security settings (PLAINTEXT here: the local broker has no SASL or
TLS listener), and no consumer group left behind."""

from __future__ import annotations

import json
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from infra.cli.main import main
from infra.tail import COLUMNS, StreamPosition, TailFilter, tail
from schemas.codec import CODEC
from schemas.events import AggregateRef, CatalogItemRetired, CatalogItemUpserted, Envelope
from schemas.exceptions import CodecError
from schemas.settings import KafkaSettings


def _event(
    tenant: str, position: int, retired: bool = False, catalog: str = "c1", item: str = ""
) -> Envelope:
    payload = (
        CatalogItemRetired(reason="gone")
        if retired
        else CatalogItemUpserted(class_id="lamp", status="active", title='a "lamp"')
    )
    return Envelope(
        tenant_id=tenant,
        catalog_id=catalog,
        history_epoch=1,
        position=position,
        event_id=uuid.uuid4(),
        aggregate=AggregateRef(type="catalog_item", id=item or f"i{position}", revision=1),
        occurred_at=datetime.now(UTC),
        payload=payload,
    )


def _produce(
    settings: KafkaSettings, topic: str, events: list[Envelope], at: datetime | None = None
) -> None:
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap})
    for e in events:
        producer.produce(
            topic,
            key=CODEC.encode_key(e.key),
            value=CODEC.encode_value(e),
            headers=CODEC.headers(e),
            timestamp=int(at.timestamp() * 1000) if at is not None else 0,
        )
    assert producer.flush(10) == 0


def _read(settings: KafkaSettings, topic: str, **kwargs: Any) -> list[dict[str, Any]]:
    wanted = kwargs.pop("wanted", TailFilter())
    start = kwargs.pop("start", "beginning")
    return list(
        tail(
            settings.client_config(),
            topic,
            wanted,
            start,
            follow=False,
            limit=None,
            on_error=lambda _p, _o, exc: None,
            **kwargs,
        )
    )


def test_tail_decodes_filters_and_reports_garbage(
    kafka_settings: KafkaSettings, topic: str
) -> None:
    producer = Producer({"bootstrap.servers": kafka_settings.kafka_bootstrap})
    events = [_event("t1", 1), _event("t2", 1), _event("t1", 2, retired=True)]
    for e in events:
        producer.produce(topic, key=CODEC.encode_key(e.key), value=CODEC.encode_value(e))
    producer.produce(topic, key=b"k", value=b"not avro")
    assert producer.flush(10) == 0

    errors: list[CodecError] = []
    seen = list(
        tail(
            kafka_settings.kafka_bootstrap,
            topic,
            TailFilter(tenant_id="t1"),
            start="beginning",
            follow=False,
            limit=None,
            on_error=lambda _p, _o, exc: errors.append(exc),
        )
    )
    assert sorted(r["position"] for r in seen) == [1, 2]
    assert {r["event_type"] for r in seen} == {"catalog_item.upserted", "catalog_item.retired"}
    assert all(r["tenant_id"] == "t1" for r in seen)
    assert [e.code for e in errors] == ["BAD_MAGIC"]


def test_each_filter(kafka_settings: KafkaSettings, topic: str) -> None:
    _produce(
        kafka_settings,
        topic,
        [
            _event("t1", 1, item="lamp"),
            _event("t1", 2, retired=True, item="lamp"),
            _event("t1", 1, catalog="c2", item="desk"),
            _event("t2", 1, item="lamp"),
        ],
    )

    def streams(wanted: TailFilter) -> list[tuple[str, str, int]]:
        found = _read(kafka_settings, topic, wanted=wanted)
        return sorted((r["tenant_id"], r["catalog_id"], r["position"]) for r in found)

    assert streams(TailFilter(tenant_id="t2")) == [("t2", "c1", 1)]
    assert streams(TailFilter(catalog_id="c2")) == [("t1", "c2", 1)]
    assert streams(TailFilter(event_type="catalog_item.retired")) == [("t1", "c1", 2)]
    assert streams(TailFilter(aggregate_id="desk")) == [("t1", "c2", 1)]
    assert streams(TailFilter(tenant_id="t1", aggregate_id="lamp")) == [
        ("t1", "c1", 1),
        ("t1", "c1", 2),
    ]
    assert len(streams(TailFilter(aggregate_type="catalog_item"))) == 4
    assert streams(TailFilter(aggregate_type="shipping_policy")) == []


def test_from_a_stream_position_scans_to_it_with_progress(
    kafka_settings: KafkaSettings, topic: str
) -> None:
    mine = [_event("t1", p) for p in range(1, 8)]
    others = [_event("t9", p) for p in range(1, 8)]
    _produce(kafka_settings, topic, [e for pair in zip(mine, others, strict=True) for e in pair])
    said: list[str] = []

    found = _read(
        kafka_settings,
        topic,
        wanted=TailFilter(tenant_id="t1", catalog_id="c1"),
        start=StreamPosition(5),
        progress=said.append,
    )
    assert [r["position"] for r in found] == [5, 6, 7]
    assert any("found position 5 of t1/c1" in line for line in said), said

    with pytest.raises(ValueError, match="tenant and the catalog"):
        _read(kafka_settings, topic, wanted=TailFilter(tenant_id="t1"), start=StreamPosition(5))


def test_from_a_time_uses_the_message_timestamps(kafka_settings: KafkaSettings, topic: str) -> None:
    then = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
    _produce(kafka_settings, topic, [_event("t1", 1), _event("t1", 2)], at=then)
    _produce(kafka_settings, topic, [_event("t1", 3)], at=then + timedelta(hours=1))
    said: list[str] = []

    found = _read(kafka_settings, topic, start=then + timedelta(minutes=30), progress=said.append)
    assert [r["position"] for r in found] == [3]
    assert found[0]["timestamp"] == (then + timedelta(hours=1)).isoformat()
    assert said and said[0].startswith(f"from {(then + timedelta(minutes=30)).isoformat()}")
    assert [r["position"] for r in _read(kafka_settings, topic, start=then)] == [1, 2, 3]
    assert _read(kafka_settings, topic, start=then + timedelta(hours=3)) == []


def test_from_the_end_shows_only_what_arrives_after_the_start(
    kafka_settings: KafkaSettings, topic: str
) -> None:
    _produce(kafka_settings, topic, [_event("t1", 1), _event("t1", 2)])
    assert _read(kafka_settings, topic, start="end") == []

    started = threading.Event()
    found: list[dict[str, Any]] = []

    def follow() -> None:
        records = tail(
            kafka_settings.client_config(),
            topic,
            TailFilter(),
            "end",
            follow=True,
            limit=2,
            on_error=lambda _p, _o, exc: None,
            progress=lambda _line: started.set(),
        )
        found.extend(records)

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    assert started.wait(30)
    _produce(kafka_settings, topic, [_event("t1", 3), _event("t1", 4)])
    reader.join(30)
    assert not reader.is_alive()
    assert [r["position"] for r in found] == [3, 4]


def _cli(topic: str, *args: str) -> Any:
    result = CliRunner().invoke(main, ["tail", "--topic", topic, "--no-follow", *args])
    assert result.exit_code == 0, result.output
    return result


def test_json_lines_hold_every_field_and_the_table_aligns(
    kafka_settings: KafkaSettings, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The security passthrough on the only listener here: PLAINTEXT, named explicitly.
    monkeypatch.setenv("GAPLESS_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT")
    events = [_event("t1", 1), _event("t1", 2, retired=True), _event("tenant-long", 10)]
    _produce(kafka_settings, topic, events)

    lines = _cli(topic, "--from", "beginning", "--json").stdout.splitlines()
    records = sorted((json.loads(line) for line in lines), key=lambda r: r["event_id"])
    by_id = {str(e.event_id): e for e in events}
    assert sorted(by_id) == [r["event_id"] for r in records]
    for r in records:
        e = by_id[r["event_id"]]
        assert r["key"] == f"{e.tenant_id}/{e.catalog_id}"
        assert r["headers"] == {"event_id": str(e.event_id), "history_epoch": "1"}
        assert isinstance(r["partition"], int) and isinstance(r["offset"], int)
        assert r["timestamp"] is not None
        assert r["aggregate"] == {"type": "catalog_item", "id": f"i{e.position}", "revision": 1}
        assert set(r) >= {"occurred_at", "payload", "dependencies", "history_epoch"}

    table = _cli(topic, "--from", "beginning", "--tenant", "t1").stdout.splitlines()
    header, rows = table[0], table[1:]
    assert header.split() == [name for name, _ in COLUMNS]
    assert len(rows) == 2
    # Left-aligned columns start where their headings do, right-aligned ones end there.
    stream_at, type_at = header.index("STREAM"), header.index("TYPE")
    position_end = header.index("POSITION") + len("POSITION")
    for e in events[:2]:
        (row,) = [r for r in rows if f"event_id={e.event_id}" in r]
        assert row[stream_at:].startswith("t1/c1@1 ")
        assert row[type_at:].startswith(f"{e.event_type} ")
        assert row[:position_end].endswith(f" {e.position}")


def test_bad_from_and_bad_security_settings_fail_naming_them(
    topic: str, monkeypatch: pytest.MonkeyPatch, kafka_settings: KafkaSettings
) -> None:
    bad = CliRunner().invoke(main, ["tail", "--topic", topic, "--from", "yesterday"])
    assert bad.exit_code == 2 and "--from" in bad.output
    needs = CliRunner().invoke(main, ["tail", "--topic", topic, "--from", "3"])
    assert needs.exit_code == 2 and "--tenant and --catalog" in needs.output

    monkeypatch.setenv("GAPLESS_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("GAPLESS_KAFKA_SASL_PASSWORD", "hunter2")
    refused = CliRunner().invoke(main, ["tail", "--topic", topic, "--no-follow"])
    assert refused.exit_code == 2
    assert "GAPLESS_KAFKA_SASL_USERNAME" in refused.output
    assert "hunter2" not in refused.output


def test_tail_joins_no_consumer_group(kafka_settings: KafkaSettings, topic: str) -> None:
    _produce(kafka_settings, topic, [_event("t1", 1)])
    assert len(_read(kafka_settings, topic)) == 1
    admin = AdminClient({"bootstrap.servers": kafka_settings.kafka_bootstrap})
    listed = admin.list_consumer_groups().result(timeout=30)
    assert not [g.group_id for g in listed.valid if g.group_id.startswith("gapless-tail-")]
