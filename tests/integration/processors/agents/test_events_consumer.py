"""The agents' events consumer against a real broker and product database: a batch's
offsets reach Kafka only after its transaction committed (a failed batch's never),
and what was stored is committed to the group by the time the consumer has stopped."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime

import psycopg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client import REGISTRY

from db.control.epochs import EpochSource, ensure_epoch
from db.settings import DatabaseSettings
from processors.agents.events import EventsConsumer
from processors.applier import offsets
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from processors.applier.tallies import BatchResult
from processors.settings import AgentSettings
from schemas.codec import CODEC
from schemas.events import AggregateRef, CatalogItemUpserted, Envelope
from schemas.settings import KafkaSettings
from tests.fixtures.waits import wait_for

TENANT, CATALOG = "events-consumer", "c1"
EVENTS = 30


def upsert(position: int, catalog: str = CATALOG) -> Envelope:
    return Envelope(
        tenant_id=TENANT,
        catalog_id=catalog,
        history_epoch=1,
        position=position,
        event_id=uuid.uuid4(),
        aggregate=AggregateRef(type="catalog_item", id=f"{catalog}-{position}", revision=1),
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        payload=CatalogItemUpserted(class_id="lamp", status="active", title=f"lamp {position}"),
    )


class Watched(Applier):
    """The real applier; before each batch it notes whether Kafka's committed offsets
    are ahead of the product database's, and its first batch fails as a lost
    connection would, after waiting long enough for an early store to be committed."""

    def __init__(self, settings: AgentSettings, epochs: EpochSource, group: str) -> None:
        super().__init__(settings.product_dsn, epochs, CODEC)
        self._kafka = Consumer(settings.client_config({"group.id": group}))
        self._topic = settings.events_topic
        self.calls = 0
        self.ahead: list[tuple[dict[int, int], dict[int, int]]] = []

    def committed(self) -> dict[int, int]:
        partitions = [TopicPartition(self._topic, p) for p in range(3)]
        found = self._kafka.committed(partitions, timeout=10)
        return {tp.partition: tp.offset for tp in found if tp.offset >= 0}

    def recorded(self) -> dict[int, int]:
        with psycopg.connect(self.product_dsn) as conn:
            return offsets.load(conn, self.consumer, self._topic)

    def apply(self, messages: Sequence[RawMessage]) -> BatchResult:
        self.calls += 1
        self._check()
        if self.calls == 1:
            # An offset stored before the batch committed would be committed to the
            # group within the auto-commit interval (1 s): give it three.
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                self._check()
                time.sleep(0.2)
            raise psycopg.OperationalError("connection lost (injected)")
        return super().apply(messages)

    def _check(self) -> None:
        kafka, database = self.committed(), self.recorded()
        if any(offset > database.get(p, 0) for p, offset in kafka.items()):
            self.ahead.append((kafka, database))

    def close(self) -> None:
        self._kafka.close()
        super().close()


@pytest.fixture()
def settings(clean_db: DatabaseSettings, topic: str) -> AgentSettings:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, TENANT, CATALOG)
    return AgentSettings(
        events_topic=topic,
        agents_app_id=f"events-consumer-{uuid.uuid4().hex[:8]}",
        agents_batch_size=7,
        agents_batch_within_seconds=0.05,
    )


@pytest.fixture()
def watched(settings: AgentSettings) -> Iterator[Watched]:
    epochs = EpochSource(settings.control_dsn)
    applier = Watched(settings, epochs, f"{settings.agents_app_id}.events")
    yield applier
    applier.close()
    epochs.close()


def test_offsets_reach_kafka_only_after_the_batch_committed(
    settings: AgentSettings, watched: Watched, kafka_settings: KafkaSettings
) -> None:
    producer = Producer(kafka_settings.client_config())
    for position in range(1, EVENTS + 1):
        event = upsert(position)
        producer.produce(
            settings.events_topic, CODEC.encode_value(event), CODEC.encode_key(event.key)
        )
    assert producer.flush(30) == 0

    consumer = EventsConsumer(settings, watched)
    consumer.start()
    try:
        wait_for(lambda: _applied() == EVENTS, f"{EVENTS} events applied", 60)
    finally:
        consumer.stop()
    assert not consumer.alive

    # The failed first batch was read again, not skipped: every event applied once.
    assert watched.calls >= 2
    assert _applied() == EVENTS
    assert watched.ahead == []
    # Closing committed what the last batch stored: the group's offsets are now the
    # product database's, past every event.
    recorded = watched.recorded()
    assert sum(recorded.values()) == EVENTS
    assert watched.committed() == recorded


def _applied() -> int:
    settings = DatabaseSettings()
    with psycopg.connect(settings.product_dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM product_item WHERE tenant_id = %s", (TENANT,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_two_consumers_of_one_process_share_the_partitions(
    settings: AgentSettings, kafka_settings: KafkaSettings
) -> None:
    """Three streams, one in each partition of the topic, two consumers in one group
    (as one agents process runs them): both are assigned partitions and apply
    batches, and every event is applied once. The events are produced once both have
    joined: produced before, the consumer that joins first could apply every one of
    them before the second is given a partition."""
    streams = [f"{CATALOG}-{n}" for n in range(3)]
    with psycopg.connect(settings.control_dsn, autocommit=True) as conn:
        for catalog in streams:
            ensure_epoch(conn, TENANT, catalog)

    epochs = EpochSource(settings.control_dsn)
    appliers = [Applier(settings.product_dsn, epochs, CODEC) for _ in range(2)]
    consumers = [EventsConsumer(settings, a, n) for n, a in enumerate(appliers)]
    try:
        for consumer in consumers:
            consumer.start()
        wait_for(
            lambda: all(c.joined for c in consumers) and sum(c.assigned for c in consumers) == 3,
            "both consumers joined, the three partitions assigned",
            60,
        )
        assert all(c.assigned > 0 for c in consumers)
        producer = Producer(kafka_settings.client_config())
        for partition, catalog in enumerate(streams):  # a stream of its own in each one
            for position in range(1, EVENTS + 1):
                event = upsert(position, catalog)
                producer.produce(
                    settings.events_topic,
                    CODEC.encode_value(event),
                    CODEC.encode_key(event.key),
                    partition=partition,
                )
        assert producer.flush(30) == 0
        wait_for(lambda: _applied() == 3 * EVENTS, f"{3 * EVENTS} events applied", 60)
    finally:
        for consumer in consumers:
            consumer.stop()
        for applier in appliers:
            applier.close()
        epochs.close()
    assert _applied() == 3 * EVENTS
    with psycopg.connect(settings.product_dsn) as conn:
        progress = conn.execute(
            "SELECT catalog_id, position, duplicate_count FROM stream_progress"
            " WHERE tenant_id = %s ORDER BY catalog_id",
            (TENANT,),
        ).fetchall()
    assert progress == [(catalog, EVENTS, 0) for catalog in streams]
    assert all(c.batches > 0 for c in consumers)


def test_each_applied_event_s_time_since_commit_and_since_kafka_is_counted(
    settings: AgentSettings, kafka_settings: KafkaSettings
) -> None:
    """Events that occurred 10 minutes ago and reached Kafka 2 minutes ago land in the
    histograms' buckets above those ages and in none below."""
    now = time.time()
    producer = Producer(kafka_settings.client_config())
    for position in range(1, EVENTS + 1):
        event = replace(upsert(position), occurred_at=datetime.fromtimestamp(now - 600, UTC))
        producer.produce(
            settings.events_topic,
            CODEC.encode_value(event),
            CODEC.encode_key(event.key),
            timestamp=int((now - 120) * 1000),
        )
    assert producer.flush(30) == 0
    consumer_id = settings.agents_consumer

    def sample(name: str, le: str | None = None) -> float:
        labels = {"consumer": consumer_id} | ({"le": le} if le else {})
        suffix = "_bucket" if le else "_count"
        return REGISTRY.get_sample_value(f"gapless_agents_{name}{suffix}", labels) or 0.0

    names = ("commit_to_applied_seconds", "published_to_applied_seconds")
    before = {(n, le): sample(n, le) for n in names for le in (None, "60.0", "300.0", "1800.0")}
    epochs = EpochSource(settings.control_dsn)
    applier = Applier(settings.product_dsn, epochs, CODEC)
    consumer = EventsConsumer(settings, applier)
    consumer.start()
    try:
        wait_for(lambda: _applied() == EVENTS, f"{EVENTS} events applied", 60)
        wait_for(
            lambda: sample(names[0]) - before[(names[0], None)] == EVENTS,
            "every applied event counted",
            10,
        )
    finally:
        consumer.stop()
        applier.close()
        epochs.close()

    def added(name: str, le: str | None) -> float:
        return sample(name, le) - before[(name, le)]

    commit, published = names
    assert [added(commit, le) for le in (None, "300.0", "1800.0")] == [EVENTS, 0, EVENTS]
    assert [added(published, le) for le in (None, "60.0", "300.0")] == [EVENTS, 0, EVENTS]
