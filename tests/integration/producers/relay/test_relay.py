"""The relay against real PostgreSQL and Kafka."""

from __future__ import annotations

import itertools
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable

import psycopg
from confluent_kafka import Consumer, Message, TopicPartition
from psycopg import pq
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.resolver.outbox import (
    OutboxRow,
    StoredRow,
    mark_published,
    published_position,
    try_claim_stream,
)
from db.settings import DatabaseSettings
from db.stream_writer import lock_cursor
from db.unit_of_work import UnitOfWork
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from producers.relay.exceptions import PublishFailed
from producers.relay.publisher import Publisher
from producers.relay.relay import Relay
from producers.resolver.catalog_items import ItemChange, RetireItem
from producers.resolver.facts import Fact
from schemas.codec import CODEC, kafka_headers
from schemas.ids import StreamId
from schemas.settings import KafkaSettings
from tests.fixtures.decisions import accept

STREAM = StreamId("t1", "c1", 1)


def _write(settings: DatabaseSettings, n: int, first: int = 0) -> None:
    pool = ConnectionPool(settings.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(settings.control_dsn)
    for i in range(first, first + n):
        facts: list[Fact] = [ItemChange("t1", "c1", f"p{i}", "lamp", f"lamp {i}")]
        if i % 3 == 2:
            facts.append(
                ItemChange("t1", "c1", f"p{i}-v", "lamp", "variant", parent_item_id=f"p{i}")
            )
        if i % 5 == 4:
            facts.append(RetireItem(f"p{i - 1}", "gone"))
        with UnitOfWork(pool, epochs, CODEC) as uow:
            accept(uow, "t1", "c1", *facts)
    pool.close()
    epochs.close()


def _consume_all(bootstrap: str, topic: str) -> list[RawMessage]:
    return [
        RawMessage(m.topic(), m.partition(), m.offset(), m.key(), m.value())
        for m in _consume_messages(bootstrap, topic)
    ]


def _consume_messages(bootstrap: str, topic: str) -> list[Message]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "relay-test", "enable.auto.commit": False}
    )
    metadata = consumer.list_topics(topic, timeout=10)
    partitions = list(metadata.topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p))[1] for p in partitions}
    seen: list[Message] = []
    while len(seen) < sum(ends.values()):
        for m in consumer.consume(500, timeout=5):
            assert m.error() is None, m.error()
            seen.append(m)
    consumer.close()
    return seen


def _unpublished(settings: DatabaseSettings) -> int:
    """Outbox rows above their stream's published position."""
    with psycopg.connect(settings.resolver_dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM outbox o LEFT JOIN stream_publication p"
            " ON p.tenant_id = o.tenant_id AND p.catalog_id = o.catalog_id"
            " AND p.history_epoch = o.history_epoch"
            " WHERE o.position > coalesce(p.published_position, 0)"
        ).fetchone()
    return int(row[0]) if row else -1


def _published(settings: DatabaseSettings, stream: StreamId = STREAM) -> int:
    with psycopg.connect(settings.resolver_dsn) as conn:
        return published_position(conn, stream)


def _outbox_count(settings: DatabaseSettings) -> int:
    with psycopg.connect(settings.resolver_dsn) as conn:
        return int((conn.execute("SELECT count(*) FROM outbox").fetchone() or (0,))[0])


def _crash_relay(
    settings: DatabaseSettings, bootstrap: str, topic: str, *batching: int
) -> subprocess.CompletedProcess[bytes]:
    """Run ``tests.fixtures.relay_crash`` (``batching``: batch size, batch to die after)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.fixtures.relay_crash",
            settings.resolver_dsn,
            bootstrap,
            topic,
            *map(str, batching),
        ],
        capture_output=True,
        timeout=120,
    )


def test_relay_killed_between_produce_and_mark_only_duplicates(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, topic: str
) -> None:
    _write(clean_db, 30)
    total = _outbox_count(clean_db)

    crashed = _crash_relay(clean_db, kafka_settings.kafka_bootstrap, topic)
    assert crashed.returncode == 9, crashed.stderr.decode()
    # Kafka has every message; the resolver still calls them unpublished.
    assert len(_consume_all(kafka_settings.kafka_bootstrap, topic)) == total
    assert _unpublished(clean_db) == total
    assert _published(clean_db) == 0

    relay = Relay(clean_db.resolver_dsn, Publisher(kafka_settings.kafka_bootstrap, topic))
    while relay.run_once():
        pass
    assert _unpublished(clean_db) == 0
    assert _published(clean_db) == total
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


def test_relay_restarted_after_a_crash_resumes_after_the_last_confirmed_batch(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, topic: str
) -> None:
    """Killed after Kafka confirmed its third batch of 10 and before recording it: the
    position stays at 20, and the next relay sends 21 onwards, so exactly the third
    batch reaches Kafka twice. Kafka gets the stored key and value bytes."""
    _write(clean_db, 30)
    total = _outbox_count(clean_db)
    assert total > 30

    crashed = _crash_relay(clean_db, kafka_settings.kafka_bootstrap, topic, 10, 3)
    assert crashed.returncode == 9, crashed.stderr.decode()
    assert _published(clean_db) == 20

    first_positions: list[int] = []

    def record(_stream: StreamId, rows: list[OutboxRow]) -> None:
        first_positions.append(rows[0].position)

    relay = Relay(
        clean_db.resolver_dsn,
        Publisher(kafka_settings.kafka_bootstrap, topic),
        batch_size=10,
        after_publish=record,
    )
    while relay.run_once():
        pass
    assert first_positions[0] == 21
    assert first_positions == list(range(21, total + 1, 10))
    assert _published(clean_db) == total

    messages = _consume_messages(kafka_settings.kafka_bootstrap, topic)
    positions = Counter(CODEC.decode_value(m.value() or b"").position for m in messages)
    assert positions == Counter([*range(1, total + 1), *range(21, 31)])
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        stored = {
            (bytes(key), bytes(value), event_id)
            for key, value, event_id in conn.execute(
                "SELECT key, value, event_id::text FROM outbox"
            ).fetchall()
        }
    shipped = set()
    for m in messages:
        headers = m.headers() or []
        event_id = dict(headers)["event_id"].decode()
        assert headers == kafka_headers(event_id, 1)
        shipped.add((m.key(), m.value(), event_id))
    assert shipped == stored


def test_published_position_never_moves_backwards(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, topic: str
) -> None:
    _write(clean_db, 30)
    total = _outbox_count(clean_db)
    relay = Relay(
        clean_db.resolver_dsn, Publisher(kafka_settings.kafka_bootstrap, topic), batch_size=7
    )
    seen = [_published(clean_db)]
    while relay.run_once():
        seen.append(_published(clean_db))
    assert seen == [*range(0, total, 7), total]

    with psycopg.connect(clean_db.resolver_dsn) as conn:
        assert mark_published(conn, STREAM, total - 10) == total
        assert mark_published(conn, STREAM, 0) == total
        conn.commit()
    assert _published(clean_db) == total


def _finishes(work: threading.Thread, seconds: float = 30.0) -> bool:
    work.start()
    work.join(timeout=seconds)
    return not work.is_alive()


def test_relay_and_writers_never_wait_for_each_other(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, topic: str
) -> None:
    """A writer holding the stream's cursor row does not stop the relay from publishing
    and recording the stream's first position; a writer commits to the stream while
    the relay holds its claim with a batch in flight."""
    _write(clean_db, 3)
    first = _outbox_count(clean_db)
    publisher = Publisher(kafka_settings.kafka_bootstrap, topic)
    with psycopg.connect(clean_db.resolver_dsn) as writer:
        lock_cursor(writer, STREAM)
        relay = threading.Thread(target=Relay(clean_db.resolver_dsn, publisher).run_once)
        relay_finished = _finishes(relay)
        writer.rollback()
    relay.join()
    assert relay_finished, "the relay waited for a writer's cursor lock"
    assert _published(clean_db) == first

    _write(clean_db, 3, first=10)
    second = _outbox_count(clean_db)
    writers_finished: list[bool] = []

    def write_while_claimed(_stream: StreamId, _rows: list[OutboxRow]) -> None:
        if not writers_finished:
            writers_finished.append(
                _finishes(threading.Thread(target=_write, args=(clean_db, 1, 100)))
            )

    Relay(clean_db.resolver_dsn, publisher, after_publish=write_while_claimed).run_once()
    assert writers_finished == [True], "a writer waited for the relay's claim"
    assert _published(clean_db) == second < _outbox_count(clean_db)


def test_one_pass_publishes_several_small_streams_with_one_wait(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, topic: str
) -> None:
    """Small backlogs of several streams go out in one pass (one delivery wait), each
    stream in its own order; the batch budget spills the rest into later passes."""
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=1, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    streams = [StreamId("t1", f"c{n}", 1) for n in range(1, 4)]
    for stream in streams:
        with UnitOfWork(pool, epochs, CODEC) as uow:  # four events: a decision, three items
            items = (ItemChange("t1", stream.catalog_id, f"i{i}", "lamp", "l") for i in range(3))
            accept(uow, "t1", stream.catalog_id, *items)
    pool.close()
    epochs.close()

    waits: list[int] = []
    sent: list[int] = []
    publisher = Publisher(kafka_settings.kafka_bootstrap, topic)
    send, confirm = publisher.send, publisher.confirm

    def counting_send(rows: list[OutboxRow]) -> None:
        sent.append(len(rows))
        send(rows)

    def counting_confirm() -> None:
        waits.append(sum(sent))
        confirm()

    publisher.send = counting_send  # type: ignore[method-assign]
    publisher.confirm = counting_confirm  # type: ignore[method-assign]
    assert Relay(clean_db.resolver_dsn, publisher, batch_size=100).run_once() == 12
    assert waits == [12]
    assert [_published(clean_db, s) for s in streams] == [4, 4, 4]

    for stream in streams:
        with psycopg.connect(clean_db.resolver_dsn) as conn:
            mark_published(conn, stream, 0)  # a no-op: positions never go back
            conn.commit()
    assert [_published(clean_db, s) for s in streams] == [4, 4, 4]


def test_a_pass_skips_a_stream_claimed_elsewhere_or_with_a_gap_and_splits_its_budget(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, topic: str
) -> None:
    """One pass over five streams: one claimed by another relay and one whose rows do
    not line up are left alone, the others share the batch budget in turn order (the
    skipped stream's share included)."""
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=1, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    streams = [StreamId("t1", f"c{n}", 1) for n in range(1, 6)]
    for stream in streams:
        with UnitOfWork(pool, epochs, CODEC) as uow:  # four events each
            items = (ItemChange("t1", stream.catalog_id, f"i{i}", "lamp", "l") for i in range(3))
            accept(uow, "t1", stream.catalog_id, *items)
    pool.close()
    epochs.close()
    held, gap = streams[1], streams[2]
    with psycopg.connect(clean_db.resolver_owner_dsn, autocommit=True) as owner:
        owner.execute(
            "DELETE FROM outbox WHERE tenant_id = %s AND catalog_id = %s AND position = 2",
            (gap.tenant_id, gap.catalog_id),
        )
    relay = Relay(clean_db.resolver_dsn, Publisher(kafka_settings.kafka_bootstrap, topic), 12)
    with psycopg.connect(clean_db.resolver_dsn) as other:
        assert try_claim_stream(other, held)
        published = relay.publish_streams(relay._connection(), streams)
        other.rollback()
    # Of the budget of 12, c1 takes 4; c2 is held; c3's rows do not line up (skipped
    # and reported), so its share goes on: c4 and c5 take 4 each.
    assert published == 12
    assert [_published(clean_db, s) for s in streams] == [4, 0, 0, 4, 4]
    messages = _consume_all(kafka_settings.kafka_bootstrap, topic)
    decoded = [CODEC.decode_value(m.value) for m in messages]
    assert sorted((e.catalog_id, e.position) for e in decoded) == [
        ("c1", 1), ("c1", 2), ("c1", 3), ("c1", 4),
        ("c4", 1), ("c4", 2), ("c4", 3), ("c4", 4),
        ("c5", 1), ("c5", 2), ("c5", 3), ("c5", 4),
    ]  # fmt: skip


def _stream_of_rows(settings: DatabaseSettings, catalog: str, items: int) -> StreamId:
    pool = ConnectionPool(settings.resolver_dsn, min_size=1, max_size=1, open=True)
    epochs = EpochSource(settings.control_dsn)
    for i in range(items):
        with UnitOfWork(pool, epochs, CODEC) as uow:  # two events: the decision, the item
            accept(uow, "t1", catalog, ItemChange("t1", catalog, f"i{i}", "lamp", "l"))
    pool.close()
    epochs.close()
    return StreamId("t1", catalog, 1)


def test_a_batch_is_read_in_chunks_sent_while_the_next_is_read_and_confirmed_once(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, topic: str
) -> None:
    """A batch larger than a read chunk: each chunk is handed to the producer as soon
    as it is read, every stream in its own order, with one wait for delivery reports
    at the end; a gap found in a later chunk stops that stream after its last whole
    chunk (the rows of its earlier chunks count) for this pass."""
    whole, gapped = _stream_of_rows(clean_db, "c1", 5), _stream_of_rows(clean_db, "c2", 5)
    with psycopg.connect(clean_db.resolver_owner_dsn, autocommit=True) as owner:
        owner.execute(
            "DELETE FROM outbox WHERE tenant_id = 't1' AND catalog_id = 'c2' AND position = 8"
        )
    sends: list[list[tuple[str, int]]] = []
    confirms = 0
    publisher = Publisher(kafka_settings.kafka_bootstrap, topic)
    send, confirm = publisher.send, publisher.confirm

    def counting_send(rows: list[StoredRow]) -> None:
        decoded = (CODEC.decode_value(OutboxRow._make(r).value) for r in rows)
        sends.append([(e.catalog_id, e.position) for e in decoded])
        send(rows)

    def counting_confirm() -> None:
        nonlocal confirms
        confirms += 1
        confirm()

    publisher.send = counting_send  # type: ignore[method-assign]
    publisher.confirm = counting_confirm  # type: ignore[method-assign]
    relay = Relay(clean_db.resolver_dsn, publisher, batch_size=100, read_chunk=3)
    published = relay.publish_streams(relay._connection(), [whole, gapped])
    # c1's 10 rows fill the first chunks and one row of the fourth, c2 takes 1…2 there
    # and 3…5 next; its chunk 6…8 misses 8, so c2 stops at 5.
    assert published == 15
    assert confirms == 1
    assert all(len(rows) <= 3 for rows in sends)
    assert [_published(clean_db, s) for s in (whole, gapped)] == [10, 5]
    assert sends[3:5] == [[("c1", 10)], [("c2", 1), ("c2", 2)]]  # one read, a send per stream
    messages = _consume_all(kafka_settings.kafka_bootstrap, topic)
    in_kafka = [CODEC.decode_value(m.value) for m in messages]
    for catalog, last in (("c1", 10), ("c2", 5)):
        positions = [e.position for e in in_kafka if e.catalog_id == catalog]
        assert positions == list(range(1, last + 1))  # one partition per stream: in order


def _waits(conn: psycopg.Connection, work: Callable[[], object]) -> int:
    """How often the client waited for the server while ``work`` ran on ``conn``: in
    libpq's trace of the messages, each run of the client's followed by the server's."""
    with tempfile.TemporaryFile("w+") as trace:
        conn.pgconn.trace(trace.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            work()
        finally:
            conn.pgconn.untrace()
        trace.seek(0)
        sent = [line.split("\t") for line in trace]
    return sum(1 for a, b in itertools.pairwise(sent) if a[0] == "F" and b[0] == "B")


def test_a_pass_waits_on_four_round_trips_and_a_failed_one_releases_its_claims(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, topic: str
) -> None:
    """The listing (one statement, no transaction), the claims with BEGIN, the rows,
    the position moves with COMMIT: four waits for the database whatever the number
    of streams. A pass whose delivery reports fail rolls back: positions unmoved, and
    the claims released at once for the next pass (or another relay)."""
    streams = [_stream_of_rows(clean_db, f"c{n}", 2) for n in range(1, 4)]
    publisher = Publisher(kafka_settings.kafka_bootstrap, topic)
    confirm = publisher.confirm

    def failing_confirm() -> None:
        confirm()
        raise PublishFailed("the broker refused (test)")

    publisher.confirm = failing_confirm  # type: ignore[method-assign]
    relay = Relay(clean_db.resolver_dsn, publisher, batch_size=100)
    conn = relay._connection()
    # The listing, the claims, the rows; then the pipeline's end and the ROLLBACK.
    assert _waits(conn, relay.run_once) == 5
    assert [_published(clean_db, s) for s in streams] == [0, 0, 0]
    assert conn.info.transaction_status == pq.TransactionStatus.IDLE
    with psycopg.connect(clean_db.resolver_dsn) as other:
        assert all(try_claim_stream(other, s) for s in streams)  # nothing still held

    publisher.confirm = confirm  # type: ignore[method-assign]
    assert _waits(conn, relay.run_once) == 4
    assert [_published(clean_db, s) for s in streams] == [4, 4, 4]
    assert conn.info.transaction_status == pq.TransactionStatus.IDLE
