"""``gapless tail`` reads real Kafka, filters, and reports undecodable messages."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from confluent_kafka import Producer

from infra.tail import TailFilter, tail
from schemas.codec import CODEC
from schemas.events import AggregateRef, CatalogItemRetired, CatalogItemUpserted, Envelope
from schemas.exceptions import CodecError
from schemas.settings import KafkaSettings


def _event(tenant: str, position: int, retired: bool = False) -> Envelope:
    payload = (
        CatalogItemRetired(reason="gone")
        if retired
        else CatalogItemUpserted(class_id="lamp", status="active", title="lamp")
    )
    return Envelope(
        tenant_id=tenant,
        catalog_id="c1",
        history_epoch=1,
        position=position,
        event_id=uuid.uuid4(),
        aggregate=AggregateRef(type="catalog_item", id=f"i{position}", revision=1),
        occurred_at=datetime.now(UTC),
        payload=payload,
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
            from_beginning=True,
            follow=False,
            limit=None,
            on_error=lambda _p, _o, exc: errors.append(exc),
        )
    )
    assert sorted(r["position"] for r in seen) == [1, 2]
    assert {r["event_type"] for r in seen} == {"catalog_item.upserted", "catalog_item.retired"}
    assert all(r["tenant_id"] == "t1" for r in seen)
    assert [e.code for e in errors] == ["BAD_MAGIC"]
