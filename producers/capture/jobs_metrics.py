"""Prometheus metrics of intake, read from the database at each scrape.

An enqueue gap shows as ``gapless_intake_jobs{status="pending"}`` staying above
zero and ``gapless_intake_oldest_job_age_seconds{status="pending"}`` growing; jobs
whose enqueue failed (and are waiting for the sweeper) are counted in
``gapless_intake_jobs_failing``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

import psycopg
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from db.repositories.capture_jobs import job_backlog
from db.tables.intake import JOB_STATUSES
from db.unit_of_work import Transaction

log = logging.getLogger(__name__)


class IntakeCollector(Collector):
    def __init__(self, connect: Callable[[], AbstractContextManager[psycopg.Connection]]) -> None:
        self._connect = connect

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily("gapless_intake_report_up", "1 if the job backlog could be read")
        try:
            with self._connect() as conn:
                backlog = {b.status: b for b in job_backlog(Transaction(conn))}
        except psycopg.Error as exc:
            log.warning("intake metrics unavailable: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        jobs = GaugeMetricFamily("gapless_intake_jobs", "Intake jobs by status", labels=["status"])
        age = GaugeMetricFamily(
            "gapless_intake_oldest_job_age_seconds",
            "Age of the oldest job in each status",
            labels=["status"],
        )
        failing = GaugeMetricFamily(
            "gapless_intake_jobs_failing",
            "Jobs carrying an error (a failed enqueue's, or the capture worker's), by status",
            labels=["status"],
        )
        for status in sorted(set(JOB_STATUSES) | set(backlog)):
            b = backlog.get(status)
            jobs.add_metric([status], b.jobs if b else 0)
            age.add_metric([status], b.oldest_age_seconds if b else 0)
            failing.add_metric([status], b.failing if b else 0)
        yield jobs
        yield age
        yield failing
