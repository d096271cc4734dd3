"""Accepting a capture (AW-02) and recording the enqueue of its job."""

from __future__ import annotations

import hashlib
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime

from psycopg_pool import ConnectionPool

from db.repositories import capture_jobs
from db.resolver import evidence as evidence_sql
from db.resolver import intake as sql
from db.unit_of_work import Transaction
from producers.capture import rules
from producers.capture.evidence import EvidenceStore
from producers.capture.exceptions import EvidenceUnavailable
from producers.capture.intake.collectors import Collector
from producers.capture.intake.enqueue import JobEnqueuer
from producers.capture.intake.exceptions import IdempotencyKeyReused
from producers.capture.settings import JobQueueSettings
from schemas.jobs import CAPTURE_JOB, JobMessage
from schemas.tracing import current_traceparent

log = logging.getLogger(__name__)

# Puts of one post at most, when the evidence sweep deletes the object between a put
# and the commit each time (it needs the artifact expired and unreferenced, so one
# round nearly always does).
_PUT_ROUNDS = 3


@dataclass(frozen=True, slots=True)
class CaptureSubmission:
    """A validated post: metadata, the decoded artifact and its idempotency key."""

    idempotency_key: str
    schema_version: int
    source_url: str
    captured_at: datetime
    content_type: str  # normalized (rules.MediaType.value)
    artifact: bytes


@dataclass(frozen=True, slots=True)
class Accepted:
    receipt: sql.ReceiptRow
    replayed: bool  # True: an earlier post with this key made the receipt


def _existing(receipt: sql.ReceiptRow | None, fingerprint: str) -> Accepted | None:
    if receipt is None:
        return None
    if receipt.request_fingerprint != fingerprint:
        raise IdempotencyKeyReused(
            f"idempotency key {receipt.idempotency_key!r} was used for a different request"
        )
    return Accepted(receipt, replayed=True)


class IntakeService:
    def __init__(
        self,
        pool: ConnectionPool,
        evidence: EvidenceStore,
        enqueuer: JobEnqueuer,
        queue: JobQueueSettings,
    ) -> None:
        self._pool = pool
        self._evidence = evidence
        self._enqueuer = enqueuer
        self._queue = queue

    def accept(self, collector: Collector, post: CaptureSubmission) -> Accepted:
        """Make the post durable and hand its job to the jobs topic.

        1. Compute the content hash, the capture's and job's deterministic ids and the
           request fingerprint; look the idempotency key up (one autocommit read). A
           receipt with the same fingerprint is returned as it is (a replay); another
           fingerprint is 409 ``IDEMPOTENCY_KEY_REUSED``. Nothing is written.
        2. Count the evidence sweep's finished deletions of the artifact's key (the
           same autocommit connection), then put the artifact into the evidence
           bucket under ``sha256/<hex>``, put-if-absent, with no database
           transaction open. A crash after this leaves an object no row references
           yet; the retried post finds it there (412, success) and goes on, so it
           converges on the same state. An object nobody retries stays unreferenced
           (the evidence sweep removes it once it is older than its window).
        3. One transaction takes the artifact's lock shared, inserts the capture, the
           receipt and the pending job, counts the key's finished deletions again,
           then commits. The sweep deletes an object only under that lock exclusive,
           after finding no capture names it and with a pending deletion recorded,
           and counts the deletion when it commits. So a count that moved, or a
           deletion still pending (a sweep that died after deleting the object, or
           one about to), means the object may have gone after our put: cancel the
           pending deletions, commit nothing else and go back to 2 (at most
           ``_PUT_ROUNDS`` times). A capture is never committed naming an object
           deleted after its put. A
           concurrent post with the same key blocks on the capture's key until the
           other commits, then inserts nothing and answers as in 1. A crash before
           COMMIT leaves nothing new; after COMMIT the receipt is durable.
        4. Enqueue the job and record the outcome (``enqueue``). A crash between 3 and
           4, or a failed enqueue, leaves the job pending; the sweeper enqueues it
           once ``job_sweep_after_seconds`` have passed.
        """
        sha256 = hashlib.sha256(post.artifact).hexdigest()
        fingerprint = rules.request_fingerprint(
            post.schema_version, post.source_url, post.captured_at, post.content_type, sha256
        )
        key = (collector.tenant_id, collector.source, collector.instance_id, post.idempotency_key)
        with self._pool.connection() as conn:
            known = _existing(sql.find_receipt_by_key(conn, CAPTURE_JOB, *key), fingerprint)
        if known:
            return known
        for _round in range(_PUT_ROUNDS):
            accepted = self._put_and_commit(collector, post, key, sha256, fingerprint)
            if accepted is not None:
                return accepted
        raise EvidenceUnavailable(
            "the evidence sweep kept deleting this artifact while it was posted; retry later"
        )

    def _put_and_commit(
        self,
        collector: Collector,
        post: CaptureSubmission,
        key: tuple[str, str, str, str],
        sha256: str,
        fingerprint: str,
    ) -> Accepted | None:
        """Steps 2-4 of ``accept``; None: the object was deleted under us, go again."""
        with self._pool.connection() as conn:
            deletions = evidence_sql.finished_object_deletions(
                Transaction(conn), rules.evidence_key(sha256)
            )
        evidence_key, _written = self._evidence.put(post.artifact, post.content_type)

        capture = sql.NewCapture(
            tenant_id=collector.tenant_id,
            capture_id=rules.capture_id(*key),
            source=collector.source,
            instance_id=collector.instance_id,
            schema_version=post.schema_version,
            source_url=post.source_url,
            captured_at=post.captured_at,
            content_type=post.content_type,
            content_sha256=sha256,
            size_bytes=len(post.artifact),
            evidence_key=evidence_key,
        )
        job = rules.job_id(capture.tenant_id, capture.capture_id, CAPTURE_JOB)
        with self._pool.connection() as conn:
            with conn.transaction():
                tx = Transaction(conn)
                # Shared with other intakes of the same bytes; the sweep takes it
                # exclusive while it decides on and deletes the object.
                evidence_sql.lock_key(tx, evidence_key, shared=True)
                cancelled = evidence_sql.cancel_pending(tx, evidence_key)
                if (
                    cancelled
                    or evidence_sql.finished_object_deletions(tx, evidence_key) != deletions
                ):
                    return None  # the cancellation commits; the put goes again
                inserted = sql.insert_capture(conn, capture)
                if inserted:
                    sql.insert_receipt(
                        conn, uuid.uuid4(), capture, post.idempotency_key, fingerprint
                    )
                    capture_jobs.insert_pending(
                        tx,
                        job,
                        capture.tenant_id,
                        capture.capture_id,
                        CAPTURE_JOB,
                        due_in_seconds=self._queue.job_sweep_after_seconds,
                        trace_context=current_traceparent(),  # the worker continues it
                    )
            receipt = sql.find_receipt_by_key(conn, CAPTURE_JOB, *key)
        assert receipt is not None, "a capture is never committed without its receipt"
        if not inserted:  # a concurrent duplicate committed first
            known = _existing(receipt, fingerprint)
            assert known is not None
            return known

        self.enqueue([JobMessage(job, CAPTURE_JOB, capture.tenant_id, capture.capture_id)])
        return Accepted(receipt, replayed=False)

    def enqueue(self, messages: list[JobMessage]) -> dict[uuid.UUID, str | None]:
        """Send the messages and record each outcome (autocommit statements, after the
        broker answered: no transaction is held while waiting for it).

        1. send and wait for the broker's acknowledgements (bounded);
        2. confirmed jobs: pending → enqueued;
        3. the others: count the attempt, keep the error, push ``next_attempt_at`` out
           by a jittered backoff.
        A crash before 2 leaves the jobs pending; the sweeper sends them again (a
        duplicate message if the first was delivered: the job id dedupes it).
        """
        if not messages:
            return {}
        outcomes = enqueue_and_record(self._pool, self._enqueuer, self._queue, messages)
        for job, error in outcomes.items():
            if error:
                log.warning("job %s left pending for the sweeper: %s", job, error)
        return outcomes


def enqueue_and_record(
    pool: ConnectionPool,
    enqueuer: JobEnqueuer,
    queue: JobQueueSettings,
    messages: list[JobMessage],
    attempts: dict[uuid.UUID, int] | None = None,
) -> dict[uuid.UUID, str | None]:
    """Steps 1-3 of ``IntakeService.enqueue``; ``attempts`` (the sweeper's) means the
    attempt was already counted when the job was claimed."""
    outcomes = enqueuer.send(messages)
    confirmed = [job for job, error in outcomes.items() if error is None]
    with pool.connection() as conn:
        tx = Transaction(conn)
        if confirmed:
            capture_jobs.mark_enqueued(tx, confirmed, count_attempt=attempts is None)
        for job, error in outcomes.items():
            if error is None:
                continue
            if attempts is None:
                delay = rules.backoff_seconds(
                    1, queue.enqueue_backoff_base_seconds, queue.enqueue_backoff_cap_seconds
                )
                delay = max(delay, queue.job_sweep_after_seconds)
                capture_jobs.record_enqueue_attempt(tx, job, delay, error[:500])
            else:
                capture_jobs.record_enqueue_error(tx, job, error[:500])
    return outcomes
