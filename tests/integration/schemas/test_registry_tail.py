"""``gapless tail`` reads both framings from one topic when the registry is configured."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer

from infra.tail import TailFilter, tail
from schemas.codec import CODEC
from schemas.events import AggregateRef, CatalogItemRetired, Envelope
from schemas.exceptions import CodecError
from schemas.registry_codec import RegistryCodec, registry_client
from schemas.settings import KafkaSettings


def retired(position: int) -> Envelope:
    return Envelope(
        tenant_id="tail",
        catalog_id="c1",
        history_epoch=1,
        position=position,
        event_id=uuid.uuid4(),
        aggregate=AggregateRef(type="catalog_item", id=f"i{position}", revision=2),
        dependencies=(),
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        payload=CatalogItemRetired(reason="gone"),
    )


def test_tail_shows_events_of_either_framing(
    kafka_settings: KafkaSettings, topic: str, registry_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    confluent = RegistryCodec(registry_client(registry_url))
    producer = Producer({"bootstrap.servers": kafka_settings.kafka_bootstrap})
    for position in (1, 2, 3, 4):
        codec = confluent if position % 2 else CODEC
        event = retired(position)
        # One partition: the order is the order written.
        producer.produce(
            topic, key=codec.encode_key(event.key), value=codec.encode_value(event), partition=0
        )
    assert producer.flush(10) == 0
    monkeypatch.setenv("GAPLESS_SCHEMA_REGISTRY_URL", registry_url)
    errors: list[CodecError] = []
    seen = list(
        tail(
            kafka_settings.kafka_bootstrap,
            topic,
            TailFilter(),
            start="beginning",
            follow=False,
            limit=None,
            on_error=lambda _p, _o, exc: errors.append(exc),
        )
    )
    assert errors == []
    assert [r["position"] for r in seen] == [1, 2, 3, 4]
