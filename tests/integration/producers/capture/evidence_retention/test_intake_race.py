"""Intake racing the evidence sweep for one artifact (the same bytes posted again
while the sweep removes the object of an expired capture): the capture intake
commits always names an object that is there."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
from psycopg_pool import ConnectionPool

from db.resolver import evidence as sql
from db.unit_of_work import Transaction
from producers.capture.evidence import EvidenceStore
from producers.capture.evidence_retention.sweep import SweepPolicy, delete_object, expire_capture
from producers.capture.intake.captures import CaptureSubmission, IntakeService
from producers.capture.intake.collectors import Collector
from producers.capture.intake.enqueue import JobEnqueuer
from producers.capture.rules import evidence_key
from producers.capture.settings import JobQueueSettings
from schemas.settings import KafkaSettings
from tests.integration.producers.capture.evidence_retention.conftest import (
    Built,
    Captures,
    app,
    owner,
)

CONTENT = b'{"items": ["posted twice"]}'


class SweepBetweenPutAndCommit(EvidenceStore):
    """The real store; after its first put, ``between`` runs: the sweep's work that
    lands between an intake's put and its commit."""

    def __init__(self, inner: EvidenceStore, between: Callable[[], None]) -> None:
        super().__init__(inner._client, inner.bucket, max_attempts=2)
        self._between: Callable[[], None] | None = between
        self.puts = 0

    def put(self, content: bytes, content_type: str) -> tuple[str, bool]:
        result = super().put(content, content_type)
        self.puts += 1
        if self._between is not None:
            between, self._between = self._between, None
            between()
        return result


@pytest.fixture()
def intake(
    captures: Captures, kafka_settings: KafkaSettings, topic: str
) -> Iterator[Callable[[EvidenceStore], IntakeService]]:
    pool = ConnectionPool(
        captures.settings.resolver_dsn,
        min_size=1,
        max_size=2,
        kwargs={"autocommit": True},
        open=True,
    )
    queue = JobQueueSettings(jobs_topic=topic, kafka_bootstrap=kafka_settings.kafka_bootstrap)
    enqueuer = JobEnqueuer(kafka_settings.kafka_bootstrap, topic, 10.0)
    yield lambda store: IntakeService(pool, store, enqueuer, queue)
    pool.close()


def _expire_and_delete(captures: Captures, expired: Built, policy: SweepPolicy) -> None:
    """A whole sweep of the expired capture: its rows, then its object."""
    with app(captures.settings) as conn:
        [ref] = sql.expiring_captures(Transaction(conn), policy.window_seconds, None, 10)
        assert ref.capture_id == expired.capture_id
        assert expire_capture(conn, ref, policy) is not None
        [pending] = sql.pending_object_deletions(Transaction(conn), 10)
        assert delete_object(conn, captures.store, pending) == "done"


def _new_capture_keys(captures: Captures) -> list[str]:
    with owner(captures.settings) as conn:
        rows = conn.execute("SELECT evidence_key FROM capture WHERE tenant_id = 't2'").fetchall()
    return [str(r[0]) for r in rows]


def test_an_object_deleted_between_the_put_and_the_commit_is_put_again(
    captures: Captures,
    store: EvidenceStore,
    policy: SweepPolicy,
    intake: Callable[[EvidenceStore], IntakeService],
) -> None:
    expired = captures.make(CONTENT, tenant="t1")
    racing = SweepBetweenPutAndCommit(store, lambda: _expire_and_delete(captures, expired, policy))
    _accept(captures, intake(racing))
    assert racing.puts == 2  # the first put's object went; the second put it back
    assert _new_capture_keys(captures) == [expired.evidence_key]
    assert store.present(expired.evidence_key)


def test_a_deletion_left_pending_after_its_object_went_is_cancelled_and_put_again(
    captures: Captures,
    store: EvidenceStore,
    intake: Callable[[EvidenceStore], IntakeService],
) -> None:
    """A sweep that died between deleting the object and completing its record."""
    key = evidence_key(hashlib.sha256(CONTENT).hexdigest())

    def dead_sweep() -> None:
        with app(captures.settings) as conn, conn.transaction():
            sql.record_object_deletion(Transaction(conn), key, "orphan", "dead")
        store.delete(key)

    racing = SweepBetweenPutAndCommit(store, dead_sweep)
    _accept(captures, intake(racing))
    assert racing.puts == 2
    assert _new_capture_keys(captures) == [key]
    assert store.present(key)
    assert [d["status"] for d in captures.deletions()] == ["cancelled"]


def _accept(captures: Captures, service: IntakeService) -> None:
    with owner(captures.settings) as conn:
        conn.execute(
            "INSERT INTO collector_instance VALUES ('t2', 'shop', 'inst-a', now())"
            " ON CONFLICT DO NOTHING"
        )
    accepted = service.accept(
        Collector("client-b", "t2", "shop", "inst-a"),
        CaptureSubmission(
            "post-1", 1, "https://shop.example/p/1", datetime.now(UTC), "application/json", CONTENT
        ),
    )
    assert not accepted.replayed
