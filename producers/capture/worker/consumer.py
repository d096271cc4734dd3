"""The worker's loop: job messages from ``intake.jobs.v1``, and the repair scan.

A message only names a job: the job row is the truth. Messages may come twice, late
or never; a job is claimed before any work, so a duplicate finds it claimed or
finished and does nothing. A message whose job the database does not hold (restored
to before it was accepted) ends ``unknown_job`` and is recorded (``JOB_GONE``), never
dropped in silence. The loop commits the consumer's offsets after the
batch's runs return; a crash before that redelivers the batch, which is harmless.
What messages cannot cover, the repair scan does (bounded pages, in job-id order):
retries whose time has come, runs whose worker died (claim expired), and enqueued
jobs whose message never arrived.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import Consumer, KafkaException
from psycopg_pool import ConnectionPool

from db.repositories import capture_jobs as jobs
from db.unit_of_work import Transaction
from producers.capture.worker import metrics
from producers.capture.worker.runs import RunReport
from schemas.exceptions import CodecError
from schemas.jobs import JobMessage
from schemas.logs import event_fields
from schemas.settings import KafkaConnection, client_config

log = logging.getLogger(__name__)


def job_consumer(kafka: KafkaConnection, group: str, topic: str, client_id: str) -> Consumer:
    consumer = Consumer(
        client_config(
            kafka,
            {
                "group.id": group,
                "client.id": client_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                # A dead worker's partitions move on soon; its jobs wait for their
                # claims to expire.
                "session.timeout.ms": 10_000,
                "logger": log,
            },
        )
    )
    consumer.subscribe([topic])
    return consumer


def due_job_ids(
    pool: ConnectionPool,
    kinds: Sequence[str],
    orphaned_after_seconds: float,
    page_size: int,
    max_pages: int,
) -> list[uuid.UUID]:
    """One pass of the repair scan: at most ``max_pages`` pages of due jobs."""
    found: list[uuid.UUID] = []
    after: uuid.UUID | None = None
    with pool.connection() as conn:
        for _ in range(max_pages):
            page = jobs.due(Transaction(conn), kinds, orphaned_after_seconds, after, page_size)
            found.extend(page)
            if len(page) < page_size:
                break
            after = page[-1]
    return found


class JobLoop:
    """Runs jobs from messages and from the repair scan, ``concurrency`` at a time."""

    def __init__(
        self,
        run_job: Callable[[uuid.UUID, JobMessage | None], RunReport],
        consumer: Any,  # confluent_kafka.Consumer (untyped)
        scan: Callable[[], list[uuid.UUID]],
        concurrency: int,
        scan_interval_seconds: float,
    ) -> None:
        self._run_job = run_job
        self._consumer = consumer
        self._scan = scan
        self._concurrency = concurrency
        self._scan_interval = scan_interval_seconds
        self.last_loop = time.time()

    def _run_all(
        self,
        pool: ThreadPoolExecutor,
        job_ids: list[uuid.UUID],
        messages: dict[uuid.UUID, JobMessage] | None = None,
    ) -> None:
        unique = list(dict.fromkeys(job_ids))
        found = messages or {}

        def run(job_id: uuid.UUID) -> RunReport | None:
            return self._safe_run(job_id, found.get(job_id))

        for job_id, outcome in zip(unique, pool.map(run, unique), strict=True):
            if outcome is not None and outcome.result != "not_claimed":
                log.info(
                    "job %s: %s %s",
                    job_id,
                    outcome.result,
                    outcome.outcomes or "",
                    extra=event_fields(job_id=job_id),
                )

    def _safe_run(self, job_id: uuid.UUID, message: JobMessage | None) -> RunReport | None:
        try:
            return self._run_job(job_id, message)
        except Exception:  # a run leaves its claim to expire; the loop goes on
            log.exception("job %s: run failed", job_id, extra=event_fields(job_id=job_id))
            return None

    def poll_once(self, pool: ThreadPoolExecutor) -> int:
        """Take up to ``concurrency`` messages, run their jobs, commit the offsets."""
        messages = self._consumer.consume(num_messages=self._concurrency, timeout=1.0)
        job_ids: list[uuid.UUID] = []
        named: dict[uuid.UUID, JobMessage] = {}
        for message in messages:
            if message.error():
                log.warning("jobs topic: %s", message.error())
                continue
            try:
                job = JobMessage.decode(message.value())
            except CodecError as exc:  # not a job; nothing to do, nothing lost
                log.warning(
                    "undecodable job message at %s[%s]@%s: %s",
                    message.topic(),
                    message.partition(),
                    message.offset(),
                    exc,
                )
                continue
            job_ids.append(job.job_id)
            named[job.job_id] = job
        self._run_all(pool, job_ids, named)
        if messages:
            # Asynchronous: a broker gone silent must not hold the loop (and the repair
            # scan, which needs no broker) until its request times out. The offsets are
            # only a hint: a commit lost with the broker redelivers jobs, and a job run
            # twice finds its outcomes recorded.
            try:
                self._consumer.commit(asynchronous=True)
            except KafkaException as exc:  # a rebalance took the partitions: redelivered
                log.warning("offset commit failed: %s", exc)
        return len(job_ids)

    def run(self, stop: threading.Event) -> None:
        """Until ``stop`` is set; finishes the runs under way, then closes the consumer."""
        next_scan = 0.0
        with ThreadPoolExecutor(self._concurrency, thread_name_prefix="capture-job") as pool:
            try:
                while not stop.is_set():
                    self.last_loop = time.time()
                    metrics.LAST_LOOP.set(self.last_loop)
                    self.poll_once(pool)
                    if time.monotonic() >= next_scan:
                        next_scan = time.monotonic() + self._scan_interval
                        try:
                            self._run_all(pool, self._scan())
                        except Exception:  # the database is away: try again next time
                            log.exception("repair scan failed")
            finally:
                self._consumer.close()
