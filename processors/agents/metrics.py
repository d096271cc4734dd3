"""Prometheus metrics of what the agents hold, read from the product database at each
scrape: parked events (``gapless_applier_parked_events``), open quarantine entries
(``gapless_applier_quarantine_open``; a message that never decoded has empty stream
labels) and the progress of every unfinished rebuild (``gapless_rebuild_*``, labelled
with its phase; its share of the work done, rate and ETA labelled with its consumer
and catalog only)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime

import psycopg
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from db.product import rebuilds
from db.product.applier_backlog import BacklogKey, open_quarantine_counts, parked_counts
from processors.rebuild.progress import estimate

log = logging.getLogger(__name__)

PROBE_TIMEOUT_SECONDS = 2
_BACKLOG = ["consumer", "tenant", "catalog", "epoch"]
_REBUILD = ["consumer", "tenant", "catalog", "epoch", "rebuild_id", "phase"]
# One unfinished rebuild per consumer and catalog: a series that keeps its identity
# through the phases.
_PROGRESS = ["consumer", "tenant", "catalog"]


def _labels(key: BacklogKey) -> list[str]:
    consumer, tenant, catalog, epoch = key
    return [consumer, tenant, catalog, "" if epoch is None else str(epoch)]


class ProductCollector(Collector):
    def __init__(self, product_dsn: str) -> None:
        self._dsn = product_dsn

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "gapless_product_report_up", "1 if the product database's state could be read"
        )
        try:
            with psycopg.connect(self._dsn, connect_timeout=PROBE_TIMEOUT_SECONDS) as conn:
                parked = parked_counts(conn)
                quarantined = open_quarantine_counts(conn)
                unfinished = rebuilds.unfinished(conn)
        except psycopg.Error as exc:
            log.warning("product metrics unavailable: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        parked_family = GaugeMetricFamily(
            "gapless_applier_parked_events",
            "Events parked until a dependency is applied",
            labels=_BACKLOG,
        )
        for key, n in sorted(parked.items(), key=str):
            parked_family.add_metric(_labels(key), n)
        yield parked_family
        quarantine_family = GaugeMetricFamily(
            "gapless_applier_quarantine_open",
            "Open quarantine entries, waiting for an operator's retry or skip",
            labels=_BACKLOG,
        )
        for key, n in sorted(quarantined.items(), key=str):
            quarantine_family.add_metric(_labels(key), n)
        yield quarantine_family
        chunks_total = GaugeMetricFamily(
            "gapless_rebuild_chunks_total", "Export chunks the rebuild loads", labels=_REBUILD
        )
        chunks_loaded = GaugeMetricFamily(
            "gapless_rebuild_chunks_loaded", "Export chunks loaded so far", labels=_REBUILD
        )
        rows_loaded = GaugeMetricFamily(
            "gapless_rebuild_rows_loaded", "Rows loaded into the shadow so far", labels=_REBUILD
        )
        for r in unfinished:
            labels = [
                r.consumer,
                r.stream.tenant_id,
                r.stream.catalog_id,
                str(r.stream.history_epoch),
                str(r.rebuild_id),
                r.phase,
            ]
            chunks_total.add_metric(labels, r.chunks_total)
            chunks_loaded.add_metric(labels, r.chunks_loaded)
            rows_loaded.add_metric(labels, r.rows_loaded)
        yield chunks_total
        yield chunks_loaded
        yield rows_loaded
        yield from _progress(unfinished, datetime.now(UTC))


def _progress(unfinished: list[rebuilds.RebuildRow], now: datetime) -> Iterable[Metric]:
    """Each unfinished rebuild's share of the work done, rate and ETA
    (``processors.rebuild.progress``); a series goes when its rebuild ends, a rate or
    an ETA not known yet is left out."""
    ratio = GaugeMetricFamily(
        "gapless_rebuild_progress_ratio",
        "Share of the rebuild's work done (rows loaded by their cost, then the catch-up)",
        labels=_PROGRESS,
    )
    rate = GaugeMetricFamily(
        "gapless_rebuild_rate_rows_per_second",
        "Rows loaded per second while loading, events applied per second while catching up",
        labels=_PROGRESS,
    )
    eta = GaugeMetricFamily(
        "gapless_rebuild_eta_seconds",
        "Seconds the rebuild's load and catch-up should still take",
        labels=_PROGRESS,
    )
    for r in unfinished:
        labels = [r.consumer, r.stream.tenant_id, r.stream.catalog_id]
        found = estimate(r, now)
        ratio.add_metric(labels, found.fraction)
        if found.rate_rows_s is not None:
            rate.add_metric(labels, found.rate_rows_s)
        if found.eta_s is not None:
            eta.add_metric(labels, found.eta_s)
    yield ratio
    yield rate
    yield eta
