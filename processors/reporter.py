"""Reporting durable progress to the resolver's retention control.

Only committed progress is read (from ``stream_progress``), so a report never runs
ahead of what the product database holds. Reports are monotonic on both sides: this
side only sends a position above the last one the resolver acknowledged, and the
resolver ignores lower ones. A report lost to a crash or a network error only makes
the resolver retain more.

A first report the resolver refuses because the stream is pruned past it
(``CONSUMER_NEEDS_REBUILD``) is logged, shown in ``gapless_consumer_needs_rebuild``
and not sent again until progress moves; the other streams carry on.
"""

from __future__ import annotations

import logging

import psycopg
from prometheus_client import Gauge

from processors.applier.progress import Stream
from processors.exceptions import RebuildRequired, ResolverUnavailable
from processors.resolver_client import ResolverClient

log = logging.getLogger(__name__)

REPORTED = Gauge(
    "gapless_reported_progress",
    "Progress the resolver acknowledged",
    ["tenant", "catalog", "epoch"],
)

NEEDS_REBUILD = Gauge(
    "gapless_consumer_needs_rebuild",
    "1 while the resolver refuses this consumer's progress on the stream (pruned past it)",
    ["tenant", "catalog", "epoch"],
)


class ProgressReporter:
    def __init__(self, product_dsn: str, client: ResolverClient, consumer: str) -> None:
        self._dsn = product_dsn
        self._client = client
        self._consumer = consumer
        self.reported: dict[Stream, int] = {}
        self.refused: dict[Stream, int] = {}

    def forget(self) -> None:
        """Drop what this instance knows it reported (another instance reports now):
        its gauges would otherwise show streams it no longer reports, and when it
        reports again it starts from what it reads, the resolver ignoring lower ones."""
        for stream in self.reported:
            REPORTED.remove(*map(str, stream))
        for stream in self.refused:
            NEEDS_REBUILD.remove(*map(str, stream))
        self.reported.clear()
        self.refused.clear()

    def committed_progress(self) -> dict[Stream, int]:
        with psycopg.connect(self._dsn) as conn:
            rows = conn.execute(
                "SELECT tenant_id, catalog_id, history_epoch, position FROM stream_progress"
                " WHERE consumer = %s",
                (self._consumer,),
            ).fetchall()
        return {(t, c, int(e)): int(p) for t, c, e, p in rows}

    def report_once(self) -> int:
        """Send every stream's progress that moved since the last acknowledged report.

        Returns how many streams were reported. Stops at the first unavailable
        resolver answer and tries again next time.
        """
        sent = 0
        for stream, position in sorted(self.committed_progress().items()):
            if position <= self.reported.get(stream, -1) or self.refused.get(stream) == position:
                continue
            try:
                held = self._client.report_progress(stream, self._consumer, position)
            except ResolverUnavailable as exc:
                log.warning("progress report deferred: %s", exc)
                break
            except RebuildRequired as exc:
                log.error(
                    "stream %s: progress %d refused, a rebuild is needed: %s", stream, position, exc
                )
                self.refused[stream] = position
                NEEDS_REBUILD.labels(*map(str, stream)).set(1)
                continue
            if self.refused.pop(stream, None) is not None:
                NEEDS_REBUILD.labels(*map(str, stream)).set(0)
            self.reported[stream] = max(held, self.reported.get(stream, -1))
            REPORTED.labels(*map(str, stream)).set(self.reported[stream])
            sent += 1
        return sent
