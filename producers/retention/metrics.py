"""Prometheus metrics of retention control, read from the database at each scrape.

Blocked retention shows as ``gapless_retention_held_back_positions`` above zero (the
floor itself, and what holds it, in ``gapless_retention_floor_position``),
a lagging consumer in ``gapless_retention_consumer_lag_positions``, a consumer whose
first report was refused because it needs a rebuild in
``gapless_retention_consumer_needs_rebuild`` (1) and a lease near expiry in
``gapless_retention_lease_seconds_to_expiry``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

import psycopg
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from producers.retention.report import StreamRetention, stream_report

log = logging.getLogger(__name__)

_STREAM = ["tenant", "catalog", "epoch"]


def _labels(s: StreamRetention) -> list[str]:
    return [s.tenant_id, s.catalog_id, str(s.history_epoch)]


class RetentionCollector(Collector):
    def __init__(self, connect: Callable[[], AbstractContextManager[psycopg.Connection]]) -> None:
        self._connect = connect

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "gapless_retention_report_up", "1 if the retention state could be read"
        )
        try:
            with self._connect() as conn:
                report = stream_report(conn)
        except psycopg.Error as exc:
            log.warning("retention metrics unavailable: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        # Literal names, so a test can find every metric the processes export.
        families = {
            "committed_position": GaugeMetricFamily(
                "gapless_retention_committed_position",
                "The stream's committed cursor",
                labels=_STREAM,
            ),
            "published_position": GaugeMetricFamily(
                "gapless_retention_published_position",
                "Every position up to this one is in Kafka",
                labels=_STREAM,
            ),
            "pruned_through": GaugeMetricFamily(
                "gapless_retention_pruned_through",
                "Every position up to this one has been pruned",
                labels=_STREAM,
            ),
            "held_back_positions": GaugeMetricFamily(
                "gapless_retention_held_back_positions",
                "Published positions the retention floor keeps",
                labels=_STREAM,
            ),
        }
        floor = GaugeMetricFamily(
            "gapless_retention_floor_position",
            "The lowest position a consumer or live lease lets the pruner reach, and what holds it",
            labels=[*_STREAM, "holder_kind", "holder"],
        )
        lag = GaugeMetricFamily(
            "gapless_retention_consumer_lag_positions",
            "Committed cursor minus the consumer's reported progress",
            labels=[*_STREAM, "consumer"],
        )
        rebuild = GaugeMetricFamily(
            "gapless_retention_consumer_needs_rebuild",
            "1 if the consumer's first report fell below pruned-through (it needs a rebuild)",
            labels=[*_STREAM, "consumer"],
        )
        expiry = GaugeMetricFamily(
            "gapless_retention_lease_seconds_to_expiry",
            "Seconds until an unreleased lease expires (negative: expired)",
            labels=[*_STREAM, "lease_id", "holder"],
        )
        for s in report:
            labels = _labels(s)
            families["committed_position"].add_metric(labels, s.committed)
            families["published_position"].add_metric(labels, s.published)
            families["pruned_through"].add_metric(labels, s.pruned_through)
            families["held_back_positions"].add_metric(labels, s.held_back)
            if s.floor is not None and s.held_by is not None:
                floor.add_metric([*labels, s.held_by.kind, s.held_by.name], s.floor)
            for c in s.consumers:
                lag.add_metric([*labels, c.consumer_id], c.lag)
                rebuild.add_metric([*labels, c.consumer_id], int(c.needs_rebuild_since is not None))
            for x in s.leases:
                expiry.add_metric([*labels, str(x.lease_id), x.holder], x.seconds_to_expiry)
        yield from families.values()
        yield floor
        yield lag
        yield rebuild
        yield expiry
