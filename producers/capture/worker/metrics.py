"""Prometheus metrics of the capture worker.

Counters and gauges of this process (``gapless_worker_*``), plus a collector that
reads the open product failures from the database at each scrape. Jobs by status
come from ``producers.capture.jobs_metrics.IntakeCollector``, which the worker registers
too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

import psycopg
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from schemas.latency import PIPELINE_BUCKETS

log = logging.getLogger(__name__)

ITEMS = Counter(
    "gapless_worker_items_total", "Products processed, by outcome of the attempt", ["outcome"]
)
RUNS = Counter("gapless_worker_runs_total", "Job runs, by how they ended", ["result"])
SETTLE = Histogram(
    "gapless_worker_capture_settle_seconds",
    "Seconds from a capture's acceptance to the end of the run that settled its job"
    " (done, or failed for good)",
    ["result"],
    buckets=PIPELINE_BUCKETS,
)
SETTLED_RESULTS = ("done", "failed")
OBJECT_READS = Counter(
    "gapless_worker_object_reads_total", "Object-store read attempts, by result", ["result"]
)
OBJECT_READS_IN_FLIGHT = Gauge(
    "gapless_worker_object_reads_in_flight", "Object-store reads running in this process"
)
LAST_LOOP = Gauge(
    "gapless_worker_last_loop_timestamp", "Unix time the worker's loop last went round"
)


class FailuresCollector(Collector):
    """``gapless_worker_open_items{outcome}``: products waiting for a retry or an
    operator, read from the database at each scrape."""

    def __init__(self, connect: Callable[[], AbstractContextManager[psycopg.Connection]]) -> None:
        self._connect = connect

    def collect(self) -> Iterable[Metric]:
        gauge = GaugeMetricFamily(
            "gapless_worker_open_items",
            "Products waiting for a retry ('retryable') or an operator ('failed')",
            labels=["outcome"],
        )
        try:
            with self._connect() as conn:
                rows = conn.execute(
                    "SELECT outcome, count(*) FROM capture_item"
                    " WHERE outcome IN ('retryable', 'failed') GROUP BY outcome"
                ).fetchall()
        except psycopg.Error as exc:
            log.warning("worker metrics unavailable: %s", exc)
            return
        found = {str(o): int(n) for o, n in rows}
        for outcome in ("retryable", "failed"):
            gauge.add_metric([outcome], found.get(outcome, 0))
        yield gauge
