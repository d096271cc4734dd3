"""The relay against real PostgreSQL and Kafka."""

from __future__ import annotations

import subprocess
import sys

import psycopg
from confluent_kafka import Consumer, TopicPartition
from psycopg_pool import ConnectionPool

from db.epochs import EpochSource
from db.outbox import try_claim_stream
from db.settings import DatabaseSettings
from db.stream_writer import StreamId
from db.unit_of_work import UnitOfWork
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from producers.relay.publisher import Publisher
from producers.relay.relay import Relay
from producers.resolver.catalog_items import ItemChange, record_item, retire_item
from schemas.codec import CODEC
from schemas.topics import KafkaSettings


def _write(settings: DatabaseSettings, n: int) -> None:
    pool = ConnectionPool(settings.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(settings.control_dsn)
    for i in range(n):
        with UnitOfWork(pool, epochs, CODEC) as uow:
            record_item(uow, ItemChange("t1", "c1", f"p{i}", "lamp", f"lamp {i}"))
            if i % 3 == 2:
                record_item(
                    uow,
                    ItemChange("t1", "c1", f"p{i}-v", "lamp", "variant", parent_item_id=f"p{i}"),
                )
            if i % 5 == 4:
                retire_item(uow, "t1", "c1", f"p{i - 1}", "gone")
            uow.commit()
    pool.close()
    epochs.close()


def _consume_all(bootstrap: str, topic: str) -> list[RawMessage]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "relay-test", "enable.auto.commit": False}
    )
    metadata = consumer.list_topics(topic, timeout=10)
    partitions = list(metadata.topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p))[1] for p in partitions}
    seen: list[RawMessage] = []
    while sum(1 for m in seen) < sum(ends.values()):
        for m in consumer.consume(500, timeout=5):
            assert m.error() is None, m.error()
            seen.append(RawMessage(m.topic(), m.partition(), m.offset(), m.key(), m.value()))
    consumer.close()
    return seen


def _unpublished(settings: DatabaseSettings) -> int:
    with psycopg.connect(settings.resolver_dsn) as conn:
        row = conn.execute("SELECT count(*) FROM outbox WHERE published_at IS NULL").fetchone()
    return int(row[0]) if row else -1


def test_relay_killed_between_produce_and_mark_only_duplicates(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, topic: str
) -> None:
    _write(clean_db, 30)
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        total = int((conn.execute("SELECT count(*) FROM outbox").fetchone() or (0,))[0])

    crashed = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.fixtures.relay_crash",
            clean_db.resolver_dsn,
            kafka_settings.kafka_bootstrap,
            topic,
        ],
        capture_output=True,
        timeout=120,
    )
    assert crashed.returncode == 9, crashed.stderr.decode()
    # Kafka has every message; the resolver still calls them unpublished.
    assert len(_consume_all(kafka_settings.kafka_bootstrap, topic)) == total
    assert _unpublished(clean_db) == total

    relay = Relay(clean_db.resolver_dsn, Publisher(kafka_settings.kafka_bootstrap, topic))
    while relay.run_once():
        pass
    assert _unpublished(clean_db) == 0
    messages = _consume_all(kafka_settings.kafka_bootstrap, topic)
    assert len(messages) == 2 * total

    applier = Applier(clean_db.product_dsn, EpochSource(clean_db.control_dsn), CODEC)
    result = applier.apply(messages)
    applier.close()
    assert result.duplicates == total
    assert result.applied == total
    assert result.progress == {("t1", "c1", 1): total}
    with psycopg.connect(clean_db.resolver_dsn) as r, psycopg.connect(clean_db.product_dsn) as p:
        accepted = r.execute(
            "SELECT item_id, status, title, parent_item_id, revision FROM catalog_item"
            " ORDER BY item_id"
        ).fetchall()
        projected = p.execute(
            "SELECT item_id, status, title, parent_item_id, revision FROM product_item"
            " ORDER BY item_id"
        ).fetchall()
    assert projected == accepted


def test_two_relays_never_claim_the_same_stream(clean_db: DatabaseSettings) -> None:
    stream = StreamId("t1", "c1", 1)
    with psycopg.connect(clean_db.resolver_dsn) as a, psycopg.connect(clean_db.resolver_dsn) as b:
        assert try_claim_stream(a, stream)
        assert not try_claim_stream(b, stream)
        assert try_claim_stream(b, StreamId("t1", "c2", 1))
        a.commit()  # releases the claim
        assert try_claim_stream(b, stream)
