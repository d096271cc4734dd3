"""Events waiting in a worker's partitions, against real Kafka and PostgreSQL: the
topic's high watermark beyond the offset the product database records as applied."""

from __future__ import annotations

import psycopg
from confluent_kafka import Producer

from db.settings import DatabaseSettings
from infra.chaos.assignment import waiting_events
from processors.applier import offsets
from processors.applier.messages import RawMessage
from schemas.settings import KafkaSettings

CONSUMER = "chaos-assignment-test"


def test_only_what_the_product_database_has_not_applied_is_waiting(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, topic: str
) -> None:
    producer = Producer(kafka_settings.client_config({"enable.idempotence": True}))
    for n in range(5):
        producer.produce(topic, value=f"m{n}".encode(), partition=0)
    producer.produce(topic, value=b"other", partition=1)
    assert producer.flush(30) == 0
    with psycopg.connect(clean_db.product_dsn) as conn:
        # Offsets 0-2 of partition 0 applied; partition 1 never read (it starts at 0).
        offsets.record(conn, CONSUMER, [RawMessage(topic, 0, o, None, b"") for o in range(3)])
        conn.commit()
    dsn = clean_db.product_dsn
    assert waiting_events(kafka_settings, dsn, topic, CONSUMER, {0}) == 2
    assert waiting_events(kafka_settings, dsn, topic, CONSUMER, {0, 1}) == 3
    assert waiting_events(kafka_settings, dsn, topic, CONSUMER, {2}) == 0
    assert waiting_events(kafka_settings, dsn, topic, CONSUMER, set()) == 0
