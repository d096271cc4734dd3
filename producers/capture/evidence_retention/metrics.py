"""Prometheus metrics of evidence retention, read from the database at each scrape:
``gapless_evidence_missing_artifacts`` above zero means a kept capture's artifact is
not in the bucket (``gapless evidence missing`` lists them)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

import psycopg
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from db.resolver import evidence as sql
from db.unit_of_work import Transaction

log = logging.getLogger(__name__)


class EvidenceCollector(Collector):
    def __init__(self, connect: Callable[[], AbstractContextManager[psycopg.Connection]]) -> None:
        self._connect = connect

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "gapless_evidence_report_up", "1 if the evidence state could be read"
        )
        try:
            with self._connect() as conn:
                tx = Transaction(conn)
                missing = sql.missing_count(tx)
                pending = len(sql.pending_object_deletions(tx, 10_000))
        except psycopg.Error as exc:
            log.warning("evidence metrics unavailable: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield GaugeMetricFamily(
            "gapless_evidence_missing_artifacts",
            "Artifacts a kept capture names that the last sweep did not find in the bucket",
            value=missing,
        )
        yield GaugeMetricFamily(
            "gapless_evidence_pending_deletions",
            "Object deletions recorded and not yet carried out",
            value=pending,
        )
