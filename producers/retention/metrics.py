"""Prometheus metrics of retention control, read from the database at each scrape.

Blocked retention shows as ``gapless_retention_held_back_positions`` above zero (the
floor itself, and what holds it, in ``gapless_retention_floor_position``),
a lagging consumer in ``gapless_retention_consumer_lag_positions``, a consumer whose
first report was refused because it needs a rebuild in
``gapless_retention_consumer_needs_rebuild`` (1) and a lease near expiry in
``gapless_retention_lease_seconds_to_expiry``.

The same lags in seconds, which stay meaningful whatever the write rate (3 positions
behind for an hour is not healthy): ``gapless_retention_unpublished_age_seconds``
(the relay's), ``gapless_retention_consumer_lag_seconds`` (the oldest event a
consumer has not applied) and ``gapless_retention_consumer_stalled_seconds`` (how
long its progress has not moved while events wait). Each is 0 when nothing waits.
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
        f = _families()
        for s in report:
            labels = _labels(s)
            f["committed_position"].add_metric(labels, s.committed)
            f["published_position"].add_metric(labels, s.published)
            f["pruned_through"].add_metric(labels, s.pruned_through)
            f["held_back_positions"].add_metric(labels, s.held_back)
            f["unpublished_age_seconds"].add_metric(labels, s.unpublished_age_s or 0.0)
            if s.floor is not None and s.held_by is not None:
                f["floor"].add_metric([*labels, s.held_by.kind, s.held_by.name], s.floor)
            for c in s.consumers:
                f["lag"].add_metric([*labels, c.consumer_id], c.lag)
                f["lag_seconds"].add_metric([*labels, c.consumer_id], c.waiting_age_s or 0.0)
                f["stalled"].add_metric([*labels, c.consumer_id], c.unchanged_s or 0.0)
                f["rebuild"].add_metric(
                    [*labels, c.consumer_id], int(c.needs_rebuild_since is not None)
                )
            for x in s.leases:
                f["expiry"].add_metric([*labels, str(x.lease_id), x.holder], x.seconds_to_expiry)
        yield from f.values()


def _families() -> dict[str, GaugeMetricFamily]:
    """Every per-stream family, empty (literal names, so a test can find every
    metric the processes export)."""
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
        "unpublished_age_seconds": GaugeMetricFamily(
            "gapless_retention_unpublished_age_seconds",
            "Seconds since the oldest unpublished outbox row was committed (0: none waits)",
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
    lag_seconds = GaugeMetricFamily(
        "gapless_retention_consumer_lag_seconds",
        "Seconds since the oldest event above the consumer's reported progress was"
        " committed (0: nothing waits)",
        labels=[*_STREAM, "consumer"],
    )
    stalled = GaugeMetricFamily(
        "gapless_retention_consumer_stalled_seconds",
        "Seconds the consumer's reported progress has not moved while events wait",
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
    return {
        **families,
        "floor": floor,
        "lag": lag,
        "lag_seconds": lag_seconds,
        "stalled": stalled,
        "rebuild": rebuild,
        "expiry": expiry,
    }
