"""Attribute definitions and values end to end: decisions recorded by the resolver,
published by the relay to a real Kafka topic, consumed back and applied by the
product applier in adversarial orders (values before their items and definitions,
duplicates, small batches). Whatever the order, the projections end up equal to the
resolver's accepted state, with nothing left parked."""

from __future__ import annotations

import random
from collections.abc import Iterator

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource, ensure_epoch
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from processors.applier.batch import DEFAULT_CONSUMER, Applier
from processors.applier.messages import RawMessage
from producers.relay.publisher import Publisher
from producers.relay.relay import Relay
from producers.resolver.attributes import (
    DefineAttribute,
    DefineClass,
    PublishAttribute,
    SetAttributeValue,
)
from producers.resolver.catalog_items import ItemChange, RetireItem
from producers.resolver.decisions import Decision, record_decision
from producers.resolver.facts import Fact
from schemas.codec import CODEC
from schemas.events import EvidenceRef
from schemas.settings import KafkaSettings

TENANT, CATALOG = "t1", "c1"
EVIDENCE = (EvidenceRef(capture_id="cap-1", locator="$.specs"),)
PRODUCT_TABLES = (
    "inbox",
    "parked_dependency",
    "parked_event",
    "product_item",
    "product_listing_mapping",
    "product_shipping_policy_version",
    "product_attribute_value",
    "product_attribute_definition",
    "stream_progress",
    "quarantine",
    "consumer_offset",
)


def _accept(pool: ConnectionPool, epochs: EpochSource, *facts: Fact) -> None:
    with UnitOfWork(pool, epochs, CODEC) as uow:
        record_decision(
            uow,
            Decision(TENANT, CATALOG, "accept", "reviewer:ana", "per the spec sheet", EVIDENCE,
                     facts=facts),
        )  # fmt: skip


def _item(pool: ConnectionPool, epochs: EpochSource, item_id: str, class_id: str) -> None:
    _accept(pool, epochs, ItemChange(TENANT, CATALOG, item_id, class_id, f"item {item_id}"))


def _write_history(settings: DatabaseSettings) -> None:
    """A catalog's attribute history: classes, a published and a draft-then-published
    definition, values revised, moved to a newer version, an item moved to another
    class its values still apply to, and an item retired after its values were set."""
    pool = ConnectionPool(settings.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(settings.control_dsn)
    try:
        _accept(
            pool,
            epochs,
            DefineClass("footwear"),
            DefineClass("shoe", "footwear"),
            DefineClass("sneaker", "shoe"),
            DefineClass("boot", "footwear"),
            DefineAttribute("size", 1, "Size (EU)", "number", ("footwear",), publish=True),
            DefineAttribute("fit", 1, "Fit", "enum", ("shoe",), ("narrow", "wide")),
        )
        for i in range(6):
            _item(pool, epochs, f"i{i}", "sneaker" if i % 2 else "boot")
        _accept(pool, epochs, *(SetAttributeValue(f"i{i}", "size", 1, 38 + i) for i in range(6)))
        _accept(pool, epochs, PublishAttribute("fit", 1), SetAttributeValue("i1", "fit", 1, "wide"))
        _accept(pool, epochs, SetAttributeValue("i1", "size", 1, "39.5"))
        _item(pool, epochs, "i1", "sneaker")  # a new item revision; the value stays
        _accept(
            pool,
            epochs,
            DefineAttribute("size", 2, "Size (US)", "text", ("sneaker",), publish=True),
            SetAttributeValue("i3", "size", 2, "7 1/2"),
            SetAttributeValue("i1", "fit", 1, "narrow"),
        )
        _accept(pool, epochs, ItemChange(TENANT, CATALOG, "i0", "shoe", "item i0, now a shoe"))
        _accept(pool, epochs, SetAttributeValue("i0", "fit", 1, "wide"))
        _accept(pool, epochs, RetireItem("i5", "discontinued"))
    finally:
        pool.close()
        epochs.close()


def _publish(settings: DatabaseSettings, bootstrap: str, topic: str) -> None:
    relay = Relay(settings.resolver_dsn, Publisher(bootstrap, topic), batch_size=7)
    while relay.run_once():
        pass


def _consume(bootstrap: str, topic: str) -> list[RawMessage]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "attr-test", "enable.auto.commit": False}
    )
    partitions = list(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    total = sum(consumer.get_watermark_offsets(TopicPartition(topic, p))[1] for p in partitions)
    seen: list[RawMessage] = []
    while len(seen) < total:
        for m in consumer.consume(500, timeout=5):
            assert m.error() is None, m.error()
            seen.append(RawMessage(m.topic(), m.partition(), m.offset(), m.key(), m.value()))
    consumer.close()
    return seen


def _accepted(dsn: str) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    with psycopg.connect(dsn) as conn:
        definitions = conn.execute(
            "SELECT d.attribute_key, d.version, d.label, d.value_type, to_jsonb(d.allowed_values),"
            " (SELECT jsonb_agg(a.class_id ORDER BY a.class_id) FROM attribute_applicability a"
            "  WHERE a.attribute_key = d.attribute_key AND a.version = d.version),"
            " d.status, d.decision_id, d.revision"
            " FROM attribute_definition d ORDER BY 1, 2"
        ).fetchall()
        values = conn.execute(
            "SELECT v.item_id, v.attribute_key, v.definition_version, d.value_type, v.value,"
            " v.item_revision, v.decision_id, v.revision FROM attribute_value v"
            " JOIN attribute_definition d ON d.attribute_key = v.attribute_key"
            " AND d.version = v.definition_version ORDER BY 1, 2"
        ).fetchall()
    return definitions, values


def _projected(dsn: str) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    with psycopg.connect(dsn) as conn:
        definitions = conn.execute(
            "SELECT attribute_key, version, label, value_type, allowed_values, applies_to,"
            " status, decision_id, revision FROM product_attribute_definition ORDER BY 1, 2"
        ).fetchall()
        values = conn.execute(
            "SELECT item_id, attribute_key, definition_version, value_type, value,"
            " item_revision, decision_id, revision FROM product_attribute_value ORDER BY 1, 2"
        ).fetchall()
    return definitions, values


def _reset_product(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {', '.join(PRODUCT_TABLES)}")


def _state(dsn: str) -> tuple[int, int]:
    """(durable progress, parked events) of the applier."""
    with psycopg.connect(dsn) as conn:
        progress = conn.execute(
            "SELECT position FROM stream_progress WHERE consumer = %s", (DEFAULT_CONSUMER,)
        ).fetchone()
        parked = conn.execute("SELECT count(*) FROM parked_event").fetchone()
    return (int(progress[0]) if progress else 0, int(parked[0]) if parked else -1)


@pytest.fixture()
def delivered(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, topic: str
) -> Iterator[list[RawMessage]]:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as control:
        ensure_epoch(control, TENANT, CATALOG)
    _write_history(clean_db)
    _publish(clean_db, kafka_settings.kafka_bootstrap, topic)
    yield _consume(kafka_settings.kafka_bootstrap, topic)


def test_values_reach_the_projection_whatever_the_delivery_order(
    clean_db: DatabaseSettings, delivered: list[RawMessage]
) -> None:
    accepted = _accepted(clean_db.resolver_dsn)
    assert len(accepted[1]) == 8 and len(accepted[0]) == 3
    events = [CODEC.decode_value(m.value or b"") for m in delivered]
    cursor = max(e.position for e in events)
    assert sorted(e.position for e in events) == list(range(1, cursor + 1))
    value_events = [e for e in events if e.event_type == "attribute_value.set"]
    assert {d.type for e in value_events for d in e.dependencies} == {
        "catalog_item",
        "attribute_definition",
    }

    epochs = EpochSource(clean_db.control_dsn)
    applier = Applier(clean_db.product_dsn, epochs, CODEC)
    try:
        with_duplicates = delivered + delivered[: len(delivered) // 3]
        orders = {
            "as published": list(delivered),
            "last first": delivered[::-1],
            **{
                f"shuffled {seed}, with duplicates": random.Random(seed).sample(
                    with_duplicates, len(with_duplicates)
                )
                for seed in range(3)
            },
        }
        for name, messages in orders.items():
            _reset_product(clean_db.product_dsn)
            parked_on_the_way = 0
            for start in range(0, len(messages), 5):
                result = applier.apply(messages[start : start + 5])
                parked_on_the_way += result.parked
            assert _state(clean_db.product_dsn) == (cursor, 0), name
            assert _projected(clean_db.product_dsn) == accepted, name
            if name == "last first":
                assert parked_on_the_way > 0  # values did arrive before what they need
    finally:
        applier.close()
        epochs.close()
