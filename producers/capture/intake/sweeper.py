"""The pending-job sweeper: the bounded repair scan for the enqueue gap.

Commit and enqueue cannot be one atomic step, so a job can stay ``pending`` (the
API crashed after COMMIT, the broker was down, the delivery timed out). The sweeper
finds pending jobs whose ``next_attempt_at`` has passed and enqueues them again, with
exponential backoff and jitter between attempts. A pass reads bounded pages in
(next_attempt_at, job_id) order with a cursor, and at most ``sweep_max_pages`` of
them. Several sweepers may run: each claims its page with SKIP LOCKED and pushes the
claimed jobs' ``next_attempt_at`` out before sending, so they never send the same
job in the same window.
"""

from __future__ import annotations

import logging
import signal
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime

import psycopg
from psycopg_pool import ConnectionPool

from db.repositories import capture_jobs
from db.unit_of_work import Transaction
from producers.capture.intake.captures import enqueue_and_record
from producers.capture.intake.enqueue import JobEnqueuer
from producers.capture.rules import backoff_seconds
from producers.capture.settings import SweeperSettings
from producers.http.probes import Heartbeat, serve
from schemas.backoff import Reconnect
from schemas.jobs import JobMessage

log = logging.getLogger(__name__)


@dataclass
class SweepResult:
    pages: int = 0
    claimed: int = 0
    enqueued: int = 0
    failed: dict[uuid.UUID, str] = field(default_factory=dict)


class Sweeper:
    def __init__(
        self, pool: ConnectionPool, enqueuer: JobEnqueuer, settings: SweeperSettings
    ) -> None:
        self._pool = pool
        self._enqueuer = enqueuer
        self._settings = settings

    def _claim_page(
        self, as_of: datetime, after: tuple[datetime, uuid.UUID] | None
    ) -> list[capture_jobs.JobState]:
        """Step 1 of a page: in one short transaction, lock a page of due pending jobs,
        count an attempt on each and push its ``next_attempt_at`` out by a jittered
        backoff (never less than the enqueue timeout, so the claim outlasts the send);
        commit. A crash after this leaves the jobs pending, due again after the
        backoff: the claim only delays a job, it never loses one."""
        s = self._settings
        with self._pool.connection() as conn, conn.transaction():
            tx = Transaction(conn)
            jobs = capture_jobs.due_pending(tx, as_of, after, s.sweep_page_size)
            delays = {
                job.job_id: max(
                    backoff_seconds(
                        job.attempts + 1,
                        s.enqueue_backoff_base_seconds,
                        s.enqueue_backoff_cap_seconds,
                    ),
                    s.enqueue_timeout_seconds * 2,
                )
                for job in jobs
            }
            capture_jobs.claim_for_enqueue(tx, delays)
        return jobs

    def sweep_once(self) -> SweepResult:
        """One pass over the jobs due now.

        Per page: 1. claim (``_claim_page``); 2. send the page's messages and wait for
        the broker (no transaction open); 3. mark the confirmed jobs enqueued and keep
        the error of the others, which stay pending until their backoff passes. A
        crash between 2 and 3 sends those jobs again later (the worker dedupes by job
        id). The cursor only moves forward, and claimed jobs are due after the pass
        started, so a pass ends after at most ``sweep_max_pages`` pages.
        """
        result = SweepResult()
        with self._pool.connection() as conn:
            as_of = capture_jobs.clock(Transaction(conn))
        after: tuple[datetime, uuid.UUID] | None = None
        while result.pages < self._settings.sweep_max_pages:
            jobs = self._claim_page(as_of, after)
            if not jobs:
                break
            result.pages += 1
            result.claimed += len(jobs)
            after = (jobs[-1].next_attempt_at, jobs[-1].job_id)
            messages = [JobMessage(j.job_id, j.kind, j.tenant_id, j.capture_id) for j in jobs]
            attempts = {j.job_id: j.attempts + 1 for j in jobs}
            outcomes = enqueue_and_record(
                self._pool, self._enqueuer, self._settings, messages, attempts
            )
            for job, error in outcomes.items():
                if error is None:
                    result.enqueued += 1
                else:
                    result.failed[job] = error
            if len(jobs) < self._settings.sweep_page_size:
                break
        return result


def run(settings: SweeperSettings, once: bool = False) -> SweepResult | None:
    """``gapless sweep-jobs``: one pass (``once``) or a pass every
    ``sweep_interval_seconds`` until SIGTERM/SIGINT.

    Looping, a pass that fails on the database (down at start-up, restarted, a pool
    with no connection to give) is logged and tried again after a bounded, jittered
    pause (``schemas.backoff.Reconnect``, never longer than the interval); the pool
    replaces broken connections. A pass cut off midway leaves claimed jobs pending,
    due again after their backoff (see ``_claim_page``), so nothing is lost.
    """
    pool = ConnectionPool(
        settings.resolver_dsn,
        min_size=1,
        max_size=2,
        kwargs={"autocommit": True},
        name="job-sweeper",
        # A connection the server dropped (a restart) is found and replaced before use.
        check=ConnectionPool.check_connection,
        # With the database away a pass waits this long for a connection, not the
        # default 30 s, so a SIGTERM then is honoured within a container's grace.
        timeout=5.0,
        open=True,
    )
    enqueuer = JobEnqueuer(
        settings.client_config(), settings.jobs_topic, settings.enqueue_timeout_seconds
    )
    sweeper = Sweeper(pool, enqueuer, settings)
    stop = threading.Event()
    reconnect = Reconnect(cap_seconds=min(5.0, settings.sweep_interval_seconds))
    heartbeat = Heartbeat(stale_after=max(60.0, settings.sweep_interval_seconds * 3))
    server = None
    try:
        if once:
            return sweeper.sweep_once()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        if settings.sweep_http_port:
            # Alive: the loop goes round; ready: a pass completed lately.
            server = serve(
                settings.sweep_http_host,
                settings.sweep_http_port,
                heartbeat.alive,
                heartbeat.passed_lately,
            )
        while not stop.is_set():
            heartbeat.looped()
            try:
                result = sweeper.sweep_once()
            except psycopg.Error as exc:  # PoolTimeout included
                pause = reconnect.failed()
                log.warning("sweep failed on the database (%s); next try in %.1fs", exc, pause)
                stop.wait(pause)
                continue
            if not reconnect.connected:
                log.info("sweeper reconnected to its database")
            reconnect.succeeded()
            heartbeat.passed()
            if result.claimed:
                log.info(
                    "swept %d pending jobs: %d enqueued, %d still pending",
                    result.claimed,
                    result.enqueued,
                    len(result.failed),
                )
            stop.wait(settings.sweep_interval_seconds)
        return None
    finally:
        if server is not None:
            server.shutdown()
        enqueuer.close()
        pool.close()
