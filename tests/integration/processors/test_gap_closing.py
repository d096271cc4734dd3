"""Lost messages are recovered from the resolver's retained events over real HTTP."""

from __future__ import annotations

import time

import psycopg
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client import REGISTRY
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from processors.applier.repair import list_entries
from processors.gaps import GapCloser
from processors.reporter import ProgressReporter
from processors.resolver_client import ResolverClient
from producers.resolver.catalog_items import ItemChange, RetireItem
from schemas.codec import CODEC
from schemas.settings import KafkaSettings
from tests.fixtures.decisions import accept
from tests.fixtures.resolver_api import RunningApi

STREAM = ("t1", "c1", 1)


def _write_history(settings: DatabaseSettings, products: int) -> None:
    pool = ConnectionPool(settings.resolver_dsn, min_size=1, max_size=1, open=True)
    epochs = EpochSource(settings.control_dsn)
    for i in range(products):
        product = ItemChange("t1", "c1", f"p{i}", "lamp", f"lamp {i}")
        variant = ItemChange("t1", "c1", f"p{i}-v", "lamp", "v", parent_item_id=f"p{i}")
        retired = (RetireItem(f"p{i}-v", "gone"),) if i % 2 else ()
        with UnitOfWork(pool, epochs, CODEC) as uow:
            accept(uow, "t1", "c1", product, variant, *retired)
    pool.close()
    epochs.close()


def _outbox(settings: DatabaseSettings) -> list[RawMessage]:
    with psycopg.connect(settings.resolver_dsn) as conn:
        rows = conn.execute("SELECT position, key, value FROM outbox ORDER BY position").fetchall()
    return [RawMessage("events", 0, p, bytes(k), bytes(v)) for p, k, v in rows]


def _state(settings: DatabaseSettings) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    cols = "item_id, class_id, status, title, parent_item_id, attributes, revision"
    with psycopg.connect(settings.resolver_dsn) as r, psycopg.connect(settings.product_dsn) as p:
        accepted = r.execute(f"SELECT {cols} FROM catalog_item ORDER BY item_id").fetchall()
        projected = p.execute(f"SELECT {cols} FROM product_item ORDER BY item_id").fetchall()
    return accepted, projected


def _progress(settings: DatabaseSettings) -> int:
    with psycopg.connect(settings.product_dsn) as conn:
        row = conn.execute("SELECT position FROM stream_progress").fetchone()
    return int(row[0]) if row else 0


def test_a_hole_and_a_lost_tail_are_filled_from_retained_events(
    clean_db: DatabaseSettings, resolver_api: RunningApi
) -> None:
    _write_history(clean_db, 10)
    messages = _outbox(clean_db)
    total = len(messages)
    delivered = [m for m in messages if m.offset not in (5, 6) and m.offset <= total - 4]
    applier = Applier(clean_db.product_dsn, EpochSource(clean_db.control_dsn), CODEC)
    first = applier.apply(delivered)
    assert first.parked > 0  # what depended on the lost positions waits
    assert _progress(clean_db) == 4

    client = ResolverClient(resolver_api.url, resolver_api.token)
    closer = GapCloser(clean_db.product_dsn, client, applier, "product-applier", threshold_s=0)
    while closer.close_once():
        pass
    assert _progress(clean_db) == total
    accepted, projected = _state(clean_db)
    assert projected == accepted
    with psycopg.connect(clean_db.product_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM parked_event").fetchone() == (0,)

    reporter = ProgressReporter(
        clean_db.product_dsn, client, "product-applier", EpochSource(clean_db.control_dsn)
    )
    assert reporter.report_once() == 1
    assert reporter.report_once() == 0  # nothing moved: nothing sent
    assert reporter.reported == {STREAM: total}
    applier.close()
    client.close()


def test_messages_deleted_from_kafka_are_recovered(
    clean_db: DatabaseSettings, resolver_api: RunningApi, kafka_settings: KafkaSettings, topic: str
) -> None:
    _write_history(clean_db, 8)
    messages = _outbox(clean_db)
    producer = Producer({"bootstrap.servers": kafka_settings.kafka_bootstrap})
    for m in messages:  # all into partition 0, in position order, like the relay would
        producer.produce(topic, key=m.key, value=m.value, partition=0)
    assert producer.flush(10) == 0
    # The oldest ten records are deleted from the topic before anyone consumed them.
    admin = AdminClient({"bootstrap.servers": kafka_settings.kafka_bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 10)]).values():
        future.result(timeout=30)

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_settings.kafka_bootstrap,
            "group.id": f"gaps-{topic}",
            "auto.offset.reset": "earliest",  # offset 0 is gone: start at the log start
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    received: list[RawMessage] = []
    deadline = time.monotonic() + 60
    while len(received) < len(messages) - 10:
        assert time.monotonic() < deadline, f"only {len(received)} messages arrived"
        for m in consumer.consume(100, timeout=5):
            assert m.error() is None
            received.append(RawMessage(topic, 0, m.offset() or 0, m.key(), m.value()))
    consumer.close()
    assert min(m.offset for m in received) == 10

    applier = Applier(clean_db.product_dsn, EpochSource(clean_db.control_dsn), CODEC)
    applier.apply(received)
    assert _progress(clean_db) == 0

    client = ResolverClient(resolver_api.url, resolver_api.token)
    closer = GapCloser(clean_db.product_dsn, client, applier, "product-applier", threshold_s=0)
    while closer.close_once():
        pass
    assert _progress(clean_db) == len(messages)
    accepted, projected = _state(clean_db)
    assert projected == accepted
    applier.close()
    client.close()


def test_an_event_quarantined_from_one_copy_is_superseded_when_another_applies(
    clean_db: DatabaseSettings, resolver_api: RunningApi
) -> None:
    """A delivered copy fails (here: a trigger refuses one item for a while, as a bug
    since fixed would) and is quarantined; the gap closer later applies the resolver's
    retained copy. The entry must not stay open: it ends ``superseded``."""
    _write_history(clean_db, 3)
    messages = _outbox(clean_db)
    product = psycopg.connect(clean_db.product_dsn, autocommit=True)
    product.execute(
        "CREATE FUNCTION refuse_p1() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " IF NEW.item_id = 'p1' THEN RAISE EXCEPTION 'p1 is refused for now'; END IF;"
        " RETURN NEW; END $$"
    )
    try:
        product.execute(
            "CREATE TRIGGER refuse_p1 BEFORE INSERT OR UPDATE ON product_item"
            " FOR EACH ROW EXECUTE FUNCTION refuse_p1()"
        )
        applier = Applier(clean_db.product_dsn, EpochSource(clean_db.control_dsn), CODEC)
        applier.apply(messages)
        [entry] = list_entries(product)
        assert entry.error_code.startswith("APPLY_FAILED") and entry.position is not None
        assert _progress(clean_db) == entry.position - 1
    finally:
        product.execute("DROP TRIGGER IF EXISTS refuse_p1 ON product_item")
        product.execute("DROP FUNCTION IF EXISTS refuse_p1()")

    client = ResolverClient(resolver_api.url, resolver_api.token)
    closer = GapCloser(clean_db.product_dsn, client, applier, "product-applier", threshold_s=0)
    while closer.close_once():
        pass
    assert _progress(clean_db) == len(messages)
    accepted, projected = _state(clean_db)
    assert projected == accepted
    assert list_entries(product) == []
    [done] = list_entries(product, status="superseded")
    assert (done.id, done.resolution) == (
        entry.id,
        "superseded: the event was applied from another copy",
    )
    product.close()
    applier.close()
    client.close()


def test_a_stream_this_consumer_never_received_anything_of_is_filled(
    clean_db: DatabaseSettings, resolver_api: RunningApi
) -> None:
    """Every message of a new stream is lost: this consumer has no progress row for
    it and nothing in its inbox. Before, the gap closer scanned only its own progress
    rows and never looked at the stream; now it learns the streams from the resolver.
    A stream it has caught up with is not fetched at all."""
    _write_history(clean_db, 4)
    client = ResolverClient(resolver_api.url, resolver_api.token)
    applier = Applier(clean_db.product_dsn, EpochSource(clean_db.control_dsn), CODEC)
    closer = GapCloser(clean_db.product_dsn, client, applier, "product-applier", threshold_s=0)
    assert _progress(clean_db) == 0
    while closer.close_once():
        pass
    assert _progress(clean_db) == len(_outbox(clean_db))
    accepted, projected = _state(clean_db)
    assert projected == accepted and projected
    assert closer.candidates() == {}  # caught up: nothing to ask the resolver for
    applier.close()
    client.close()


def test_a_refused_first_report_is_shown_and_the_other_streams_carry_on(
    clean_db: DatabaseSettings, resolver_api: RunningApi
) -> None:
    """A stream pruned past this consumer's progress before it ever reported: the
    resolver refuses the report (CONSUMER_NEEDS_REBUILD); the reporter shows it in
    ``gapless_consumer_needs_rebuild``, does not send the same position again, and
    reports the other streams."""
    _write_history(clean_db, 2)
    total = len(_outbox(clean_db))
    with psycopg.connect(clean_db.product_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO stream_progress (consumer, tenant_id, catalog_id, history_epoch, position)"
            " VALUES ('late', 't1', 'c1', 1, 1)"
        )
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO stream_retention (tenant_id, catalog_id, history_epoch, pruned_through)"
            " VALUES ('t1', 'c1', 1, 3)"
        )
        conn.execute("DELETE FROM outbox WHERE position <= 3")
    client = ResolverClient(resolver_api.url, resolver_api.token)
    reporter = ProgressReporter(
        clean_db.product_dsn, client, "late", EpochSource(clean_db.control_dsn)
    )
    assert reporter.report_once() == 0
    assert reporter.refused == {STREAM: 1}
    assert REGISTRY.get_sample_value("gapless_consumer_needs_rebuild", _labels()) == 1
    assert reporter.report_once() == 0  # the same position is not sent again

    # Rebuilt past the pruned position: reported, and the gauge goes back to 0.
    with psycopg.connect(clean_db.product_dsn, autocommit=True) as conn:
        conn.execute("UPDATE stream_progress SET position = %s WHERE consumer = 'late'", (total,))
    assert reporter.report_once() == 1
    assert reporter.reported == {STREAM: total} and reporter.refused == {}
    assert REGISTRY.get_sample_value("gapless_consumer_needs_rebuild", _labels()) == 0
    client.close()


def _labels() -> dict[str, str]:
    return {"tenant": "t1", "catalog": "c1", "epoch": "1"}
