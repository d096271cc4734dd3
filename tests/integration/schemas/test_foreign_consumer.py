"""Events any Confluent consumer can read: with a schema registry configured, what the
writers commit and the relay publishes is read by confluent-kafka's own
``DeserializingConsumer`` and ``AvroDeserializer``, pointed at nothing but the
registry's URL, and every field of every event type equals the event the resolver
retained (its outbox row, read back with our codec)."""

from __future__ import annotations

import typing
from typing import Any

import psycopg
import pytest
from confluent_kafka import DeserializingConsumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.settings import DatabaseSettings
from infra.demo.workload import run_workload
from producers.relay.publisher import Publisher
from producers.relay.relay import Relay
from schemas import records
from schemas.events import Envelope, Payload
from schemas.registry_codec import RegistryCodec
from schemas.settings import KafkaSettings

TENANT, CATALOG = "foreign", "c1"


def _expected(event: Envelope) -> dict[str, Any]:
    """The event as an Avro reader that names no union branch gives it back."""
    payload = records.BY_TYPE[type(event.payload)].to_record(event.payload)
    return {
        "tenant_id": event.tenant_id,
        "catalog_id": event.catalog_id,
        "history_epoch": event.history_epoch,
        "position": event.position,
        "event_id": event.event_id,
        "event_type": event.event_type,
        "aggregate": records.AGGREGATE.to_record(event.aggregate),
        "dependencies": [records.AGGREGATE.to_record(d) for d in event.dependencies],
        "occurred_at": event.occurred_at,
        "payload": payload,
    }


def _read_all(bootstrap: str, topic: str, registry_url: str) -> list[tuple[Any, Any]]:
    # A bound on each request, as the writers' own client has: a request the registry
    # leaves unanswered on a kept-alive connection times out and is retried on a new
    # one instead of hanging the test (seen once, 2026-12-06).
    client = SchemaRegistryClient({"url": registry_url, "timeout": 10})
    consumer = DeserializingConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "foreign-consumer",
            "enable.auto.commit": False,
            "key.deserializer": AvroDeserializer(client),
            "value.deserializer": AvroDeserializer(client),
        }
    )
    try:
        partitions = list(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        total = sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        )
        seen: list[tuple[Any, Any]] = []
        while len(seen) < total:
            message = consumer.poll(10)
            assert message is not None, f"read {len(seen)} of {total} messages"
            assert message.error() is None, message.error()
            seen.append((message.key(), message.value()))
        return seen
    finally:
        consumer.close()


def test_a_stock_avro_deserializer_reads_every_event_type_field_for_field(
    clean_db: DatabaseSettings,
    kafka_settings: KafkaSettings,
    topic: str,
    registry_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GAPLESS_SCHEMA_REGISTRY_URL", registry_url)
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=4, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    try:
        run_workload(pool, epochs, [(TENANT, CATALOG)], 400, 2, rollback_rate=0.0)
    finally:
        pool.close()
        epochs.close()
    relay = Relay(clean_db.resolver_dsn, Publisher(kafka_settings.kafka_bootstrap, topic))
    while relay.run_once():
        pass

    ours = RegistryCodec(SchemaRegistryClient({"url": registry_url}))
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        rows = conn.execute("SELECT key, value FROM outbox ORDER BY position").fetchall()
    assert all(bytes(value)[0] == 0 for _, value in rows), "not the Confluent framing"
    retained = {e.event_id: e for e in (ours.decode_value(bytes(v)) for _, v in rows)}
    assert {type(e.payload) for e in retained.values()} == set(typing.get_args(Payload))

    read = _read_all(kafka_settings.kafka_bootstrap, topic, registry_url)
    assert len(read) == len(retained)
    for key, value in read:
        event = retained[value["event_id"]]
        assert key == {"tenant_id": event.tenant_id, "catalog_id": event.catalog_id}
        assert value == _expected(event)
