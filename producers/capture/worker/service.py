"""The capture worker process (``gapless resolver-worker``): its composition root,
signals, health and metrics."""

from __future__ import annotations

import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING

import psycopg
from botocore.exceptions import BotoCoreError, ClientError
from prometheus_client import REGISTRY
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.control.pauses import PauseWatch
from db.objects import s3_client
from db.resolver.commit_notifier import CommitNotifier
from producers.capture.jobs_metrics import IntakeCollector
from producers.capture.worker.consumer import JobLoop, due_job_ids, job_consumer
from producers.capture.worker.metrics import FailuresCollector
from producers.capture.worker.objects import ClusterSlots, EvidenceReader
from producers.capture.worker.pipeline import CaptureWorker, Parse, parse_capture
from producers.capture.worker.resolution import RESOLVE, Resolve
from producers.capture.worker.retries import RetryPolicy
from producers.capture.worker.settings import WorkerSettings
from producers.http.probes import serve
from schemas.registry_codec import codec_for

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger(__name__)


@dataclass
class Wiring:
    """What ``build`` made; ``close`` releases it."""

    worker: CaptureWorker
    pool: ConnectionPool
    uow_pool: ConnectionPool
    epochs: EpochSource
    slots: ClusterSlots | None
    pauses: PauseWatch | None = None
    notifier: CommitNotifier | None = None

    def close(self) -> None:
        if self.pauses is not None:
            self.pauses.stop()
        if self.notifier is not None:
            self.notifier.close()
        for pool in (self.uow_pool, self.pool):
            pool.close()
        if self.slots is not None:
            self.slots.close()
        self.epochs.close()


def build(
    settings: WorkerSettings, parse: Parse = parse_capture, resolve: Resolve = RESOLVE
) -> Wiring:
    s = settings
    connections = s.worker_concurrency + 2  # each job thread, the scan, the metrics
    pool = ConnectionPool(
        s.resolver_dsn,
        min_size=1,
        max_size=connections,
        kwargs={"autocommit": True},
        name="resolver-worker",
        open=True,
    )
    uow_pool = ConnectionPool(
        s.resolver_dsn,
        min_size=1,
        max_size=s.worker_concurrency,
        name="resolver-worker-uow",
        open=True,
    )
    slots = (
        ClusterSlots(s.resolver_dsn, s.worker_s3_cluster_concurrency, s.s3_max_concurrency)
        if s.worker_s3_cluster_concurrency
        else None
    )
    epochs = EpochSource(s.control_dsn)
    pauses = s.pause_watch("capture-worker").start()
    retries = (s.worker_retry_base_seconds, s.worker_retry_cap_seconds)
    notifier = CommitNotifier(s.resolver_dsn, "capture-worker-notifier").start()
    worker = CaptureWorker(
        pool,
        uow_pool,
        epochs,
        codec_for(s),
        EvidenceReader.from_settings(s, slots),
        parse,
        resolve,
        owner=s.worker_id,
        claim_seconds=s.worker_claim_seconds,
        item_retries=RetryPolicy(s.worker_item_max_attempts, *retries),
        job_retries=RetryPolicy(s.worker_job_max_attempts, *retries),
        pauses=pauses,
        notifier=notifier,
        settle_batch=s.worker_settle_batch,
    )
    return Wiring(worker, pool, uow_pool, epochs, slots, pauses, notifier)


def run(
    settings: WorkerSettings, parse: Parse = parse_capture, stop: threading.Event | None = None
) -> None:
    """Run until SIGTERM or SIGINT (or ``stop``), then let the runs under way finish.

    Stopping mid-run is safe anyway: a killed run's products are settled or not
    (never half), and its job resumes from the checkpoint once its claim expires.
    """
    stop = stop or threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("resolver-worker stopping on signal %d", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    wiring = build(settings, parse)
    loop = JobLoop(
        wiring.worker.run,
        job_consumer(
            settings.client_config(), settings.worker_group, settings.jobs_topic, settings.worker_id
        ),
        _scan(wiring, settings),
        settings.worker_concurrency,
        settings.worker_scan_interval_seconds,
    )
    server = None
    if settings.worker_http_port:
        for collector in (
            IntakeCollector(wiring.pool.connection),
            FailuresCollector(wiring.pool.connection),
        ):
            REGISTRY.register(collector)
        stale_after = max(30.0, settings.worker_scan_interval_seconds * 3)
        probe = _probe_client(settings)
        server = serve(
            settings.worker_http_host,
            settings.worker_http_port,
            # Alive: the job loop goes round (it polls, scans and hands out runs);
            # ready: and the resolver database and the evidence bucket answer.
            lambda: time.time() - loop.last_loop < stale_after,
            lambda: (
                _database_answers(wiring.pool)
                and _evidence_answers(probe, settings.evidence_bucket)
            ),
        )
    log.info(
        "resolver-worker %s started: topic %s, group %s",
        settings.worker_id,
        settings.jobs_topic,
        settings.worker_group,
    )
    try:
        loop.run(stop)
    finally:
        if server is not None:
            server.shutdown()
        wiring.close()
        log.info("resolver-worker stopped")


def _database_answers(pool: ConnectionPool) -> bool:
    """Not ready while the resolver database is away: runs fail and leave their jobs
    to the repair scan until it answers again (the pool replaces broken connections
    as they come back)."""
    try:
        with pool.connection(timeout=2) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:  # PoolTimeout included
        return False
    return True


PROBE_TIMEOUT_SECONDS = 2.0


def _probe_client(settings: WorkerSettings) -> S3Client:
    """A client of its own for the readiness probe, bounded tighter than the reads: a
    stalled object store makes the probe answer not ready within seconds."""
    bounds = {
        "s3_connect_timeout_seconds": PROBE_TIMEOUT_SECONDS,
        "s3_read_timeout_seconds": PROBE_TIMEOUT_SECONDS,
        "s3_max_concurrency": 1,
    }
    return s3_client(settings.model_copy(update=bounds))


def _evidence_answers(client: S3Client, bucket: str) -> bool:
    """Not ready while the evidence bucket does not answer: runs cannot read their
    captures and leave their jobs to retry (with backoff) until it answers again."""
    try:
        client.head_bucket(Bucket=bucket)
    except (BotoCoreError, ClientError):
        return False
    return True


def _scan(wiring: Wiring, settings: WorkerSettings) -> Callable[[], list[uuid.UUID]]:
    s = settings
    return lambda: due_job_ids(
        wiring.pool,
        CaptureWorker.KINDS,
        s.worker_orphaned_after_seconds,
        s.worker_scan_page_size,
        s.worker_scan_max_pages,
    )
