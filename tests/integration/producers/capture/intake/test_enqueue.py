"""The enqueue gap: a failed enqueue leaves the job pending, and the sweeper later
puts it on the real jobs topic, which a consumer reads back."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition
from fastapi.testclient import TestClient
from psycopg_pool import ConnectionPool

from db.repositories import capture_jobs
from db.settings import DatabaseSettings
from db.unit_of_work import Transaction
from producers.api import create_app
from producers.capture.intake.enqueue import JobEnqueuer
from producers.capture.intake.sweeper import Sweeper
from producers.capture.settings import SweeperSettings
from schemas.jobs import JobMessage
from schemas.settings import KafkaSettings
from schemas.topics import JOBS_TOPIC

from .conftest import MakeSettings, capture_body, closed_port, post


def _job(settings: DatabaseSettings, job_id: str) -> capture_jobs.JobState:
    with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
        job = capture_jobs.get(Transaction(conn), uuid.UUID(job_id))
    assert job is not None
    return job


def _make_due(settings: DatabaseSettings) -> None:
    with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
        conn.execute("UPDATE intake_job SET next_attempt_at = clock_timestamp() - interval '1s'")


@pytest.fixture()
def jobs_topic_reader(kafka_settings: KafkaSettings) -> Iterator[Consumer]:
    """A consumer of the real jobs topic, positioned at its current end."""
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_settings.kafka_bootstrap,
            "group.id": f"test-intake-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    metadata = consumer.list_topics(JOBS_TOPIC, timeout=15)
    partitions = []
    for p in metadata.topics[JOBS_TOPIC].partitions:
        _low, high = consumer.get_watermark_offsets(TopicPartition(JOBS_TOPIC, p), timeout=15)
        partitions.append(TopicPartition(JOBS_TOPIC, p, high))
    consumer.assign(partitions)
    yield consumer
    consumer.close()


def _read_jobs(consumer: Consumer, wanted: set[uuid.UUID], timeout: float = 20) -> list[JobMessage]:
    found: list[JobMessage] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not wanted <= {m.job_id for m in found}:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        message = JobMessage.decode(msg.value())
        assert msg.key() == message.key()
        if message.job_id in wanted:
            found.append(message)
    return found


def test_a_failed_enqueue_leaves_the_job_pending_and_the_sweeper_enqueues_it(
    make_settings: MakeSettings,
    clean_db: DatabaseSettings,
    collector: str,
    jobs_topic_reader: Consumer,
    kafka_settings: KafkaSettings,
) -> None:
    broken = make_settings(
        kafka_bootstrap=f"127.0.0.1:{closed_port()}",
        jobs_topic=JOBS_TOPIC,
        enqueue_timeout_seconds=1.0,
        job_sweep_after_seconds=60,
    )
    with TestClient(create_app(broken)) as client:
        response = post(client, collector, capture_body())
        metrics = client.get("/metrics").text
    assert response.status_code == 201  # the receipt is durable whatever the broker does
    assert 'gapless_intake_jobs{status="pending"} 1.0' in metrics
    assert 'gapless_intake_jobs_failing{status="pending"} 1.0' in metrics
    receipt = response.json()
    job = _job(clean_db, receipt["job_id"])
    assert (job.status, job.attempts) == ("pending", 1)
    assert job.last_error and job.last_error.startswith("kafka:")

    settings = SweeperSettings(
        resolver_dsn=clean_db.resolver_dsn,
        kafka_bootstrap=kafka_settings.kafka_bootstrap,
        jobs_topic=JOBS_TOPIC,
        enqueue_timeout_seconds=10,
        sweep_page_size=10,
    )
    pool = ConnectionPool(
        clean_db.resolver_dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True
    )
    enqueuer = JobEnqueuer(settings.kafka_bootstrap, JOBS_TOPIC, 10)
    try:
        sweeper = Sweeper(pool, enqueuer, settings)
        assert sweeper.sweep_once().claimed == 0  # not due yet: the bound has not passed
        _make_due(clean_db)
        result = sweeper.sweep_once()
        assert (result.claimed, result.enqueued, result.failed) == (1, 1, {})
        assert sweeper.sweep_once().claimed == 0  # nothing left pending
    finally:
        enqueuer.close()
        pool.close()
    job = _job(clean_db, receipt["job_id"])
    assert (job.status, job.attempts, job.last_error) == ("enqueued", 2, None)
    [message] = _read_jobs(jobs_topic_reader, {job.job_id})
    assert message == JobMessage(
        job.job_id, "capture.process", "t1", uuid.UUID(receipt["capture_id"])
    )


def test_the_sweeper_backs_off_while_the_broker_is_down_and_pages_through_many_jobs(
    make_settings: MakeSettings,
    clean_db: DatabaseSettings,
    collector: str,
    kafka_settings: KafkaSettings,
    topic: str,
) -> None:
    broken = make_settings(
        kafka_bootstrap=f"127.0.0.1:{closed_port()}",
        jobs_topic=topic,
        enqueue_timeout_seconds=0.5,
    )
    with TestClient(create_app(broken)) as client:
        receipts = [post(client, collector, capture_body()).json() for _ in range(7)]
    _make_due(clean_db)
    pool = ConnectionPool(
        clean_db.resolver_dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True
    )
    down = SweeperSettings(
        resolver_dsn=clean_db.resolver_dsn,
        kafka_bootstrap=f"127.0.0.1:{closed_port()}",
        jobs_topic=topic,
        enqueue_timeout_seconds=0.5,
        sweep_page_size=3,
        enqueue_backoff_base_seconds=30,
    )
    enqueuer = JobEnqueuer(down.kafka_bootstrap, topic, 0.5)
    try:
        result = Sweeper(pool, enqueuer, down).sweep_once()
        assert (result.pages, result.claimed, result.enqueued) == (3, 7, 0)
        # Every attempt is counted and pushed out by the backoff: a second pass
        # right away finds nothing due.
        assert Sweeper(pool, enqueuer, down).sweep_once().claimed == 0
    finally:
        enqueuer.close()
    jobs = [_job(clean_db, r["job_id"]) for r in receipts]
    assert {(j.status, j.attempts) for j in jobs} == {("pending", 2)}
    assert all(j.last_error for j in jobs)

    _make_due(clean_db)
    up = down.model_copy(update={"kafka_bootstrap": kafka_settings.kafka_bootstrap})
    enqueuer = JobEnqueuer(up.kafka_bootstrap, topic, 10)
    try:
        result = Sweeper(pool, enqueuer, up).sweep_once()
    finally:
        enqueuer.close()
        pool.close()
    assert (result.claimed, result.enqueued) == (7, 7)
    assert {_job(clean_db, r["job_id"]).status for r in receipts} == {"enqueued"}


def test_two_sweepers_share_the_backlog_without_sending_a_job_twice(
    make_settings: MakeSettings,
    clean_db: DatabaseSettings,
    collector: str,
    kafka_settings: KafkaSettings,
    topic: str,
) -> None:
    import threading

    broken = make_settings(
        kafka_bootstrap=f"127.0.0.1:{closed_port()}", jobs_topic=topic, enqueue_timeout_seconds=0.5
    )
    with TestClient(create_app(broken)) as client:
        receipts = [post(client, collector, capture_body()).json() for _ in range(10)]
    _make_due(clean_db)
    settings = SweeperSettings(
        resolver_dsn=clean_db.resolver_dsn,
        kafka_bootstrap=kafka_settings.kafka_bootstrap,
        jobs_topic=topic,
        enqueue_timeout_seconds=10,
        sweep_page_size=2,
    )
    results = []
    start = threading.Barrier(2)

    def sweep() -> None:
        with ConnectionPool(
            clean_db.resolver_dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True
        ) as pool:
            enqueuer = JobEnqueuer(settings.kafka_bootstrap, topic, 10)
            start.wait()
            results.append(Sweeper(pool, enqueuer, settings).sweep_once())
            enqueuer.close()

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.claimed for r in results) == 10
    assert sum(r.enqueued for r in results) == 10
    jobs = [_job(clean_db, r["job_id"]) for r in receipts]
    # One failed attempt by the API, exactly one by whichever sweeper claimed it.
    assert {(j.status, j.attempts) for j in jobs} == {("enqueued", 2)}


def test_concurrent_sends_each_get_their_own_confirmations(
    kafka_settings: KafkaSettings, jobs_topic_reader: Consumer
) -> None:
    """Many request threads send at once; the enqueuer's one poller serves every
    delivery report and wakes each sender with exactly its own jobs confirmed. After
    ``close`` its poller has stopped."""
    import threading

    before = set(threading.enumerate())
    enqueuer = JobEnqueuer(kafka_settings.client_config(), JOBS_TOPIC, 10.0)
    poller = [t for t in set(threading.enumerate()) - before if t.name == "intake-enqueue"]
    assert len(poller) == 1 and poller[0].is_alive()
    jobs = [[uuid.uuid4() for _ in range(3)] for _ in range(8)]
    results: list[dict[uuid.UUID, str | None]] = [{} for _ in jobs]

    def send(index: int) -> None:
        messages = [JobMessage(j, "capture.process", "t1", uuid.uuid4()) for j in jobs[index]]
        results[index] = enqueuer.send(messages)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        for sent, result in zip(jobs, results, strict=True):
            assert result == dict.fromkeys(sent)  # each confirmed, none of the others'
    finally:
        enqueuer.close()
    assert not poller[0].is_alive()
    # Every message is on the topic, once.
    wanted = {str(j) for sent in jobs for j in sent}
    seen: list[str] = []
    deadline = time.monotonic() + 30
    while len(seen) < len(wanted) and time.monotonic() < deadline:
        for m in jobs_topic_reader.consume(100, timeout=1.0):
            key = m.key()
            if m.error() is None and isinstance(key, bytes):
                seen.append(key.decode())
    assert sorted(k for k in seen if k in wanted) == sorted(wanted)
