"""Reporting durable progress to the resolver's retention control.

Only committed progress is read (from ``stream_progress``), so a report never runs
ahead of what the product database holds. Reports are monotonic on both sides: this
side only sends a position above the last one the resolver acknowledged, and the
resolver ignores lower ones. A report lost to a crash or a network error only makes
the resolver retain more.

One pass (``report_once``), stream by stream in order:

1. read this consumer's progress rows, its standing refusals (``db.product.report_refusals``)
   and the epochs the product side has settled as superseded; then each catalog's
   current epoch from the control database;
2. a stream of an epoch below the catalog's current one (fenced) or below a settled
   fence (``superseded_epoch``) is history: it is not reported at all (the resolver
   prunes a fenced stream on its own rule, whatever its consumers say), and a
   refusal it had is cleared;
3. every other stream whose progress moved since the last acknowledged report is
   sent. An acknowledged report clears the stream's refusal. A refusal
   (``ResolverRefused``: the resolver's history went back under this consumer,
   ``POSITION_BEYOND_COMMITTED``; events it needs are pruned,
   ``CONSUMER_NEEDS_REBUILD``; any other answer) is recorded for that stream alone
   and the pass goes on with the next stream: one tenant's anomaly never holds
   another's retention. A stream refused ``CONSUMER_NEEDS_REBUILD`` is not sent again
   until its progress moves (the answer could not change); other refusals are sent
   again each pass. An unavailable resolver ends the pass (it is the whole resolver);
   the next pass tries again;
4. ``gapless_progress_report_refused{code}`` is set to the number of this consumer's
   streams refused per code.

A crash in the middle of a pass leaves some refusals recorded or cleared and others
not yet: the next pass reads them back and carries on, each a stream's own row.
"""

from __future__ import annotations

import logging
from collections import Counter

import psycopg
from prometheus_client import Gauge

from db.control.epochs import EpochSource
from db.product import report_refusals
from db.product.inbox_pruning import superseded_catalogs
from db.product.report_refusals import Refusal
from processors.applier.progress import Stream
from processors.exceptions import ResolverRefused, ResolverUnavailable
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

REFUSED = Gauge(
    "gapless_progress_report_refused",
    "Streams whose last progress report the resolver refused, by the resolver's code"
    " (gapless status lists them under REPORT REFUSED)",
    ["code"],
)

NEEDS_REBUILD_CODE = "CONSUMER_NEEDS_REBUILD"


class ProgressReporter:
    def __init__(
        self, product_dsn: str, client: ResolverClient, consumer: str, epochs: EpochSource
    ) -> None:
        self._dsn = product_dsn
        self._client = client
        self._consumer = consumer
        self._epochs = epochs
        self.reported: dict[Stream, int] = {}
        self.refused: dict[Stream, int] = {}
        """The streams refused when the last pass ended, at the position refused."""
        self._needs_rebuild: set[Stream] = set()
        self._codes: set[str] = set()

    def forget(self) -> None:
        """Drop what this instance knows it reported (another instance reports now):
        its gauges would otherwise show streams it no longer reports, and when it
        reports again it starts from what it reads, the resolver ignoring lower ones.
        The refusals stay recorded: they are the stream's, not this instance's."""
        for stream in self.reported:
            REPORTED.remove(*map(str, stream))
        for stream in self._needs_rebuild:
            NEEDS_REBUILD.remove(*map(str, stream))
        for code in self._codes:
            REFUSED.remove(code)
        self.reported.clear()
        self.refused.clear()
        self._needs_rebuild.clear()
        self._codes.clear()

    def committed_progress(self) -> dict[Stream, int]:
        with psycopg.connect(self._dsn) as conn:
            return self._progress(conn)

    def _progress(self, conn: psycopg.Connection) -> dict[Stream, int]:
        rows = conn.execute(
            "SELECT tenant_id, catalog_id, history_epoch, position FROM stream_progress"
            " WHERE consumer = %s",
            (self._consumer,),
        ).fetchall()
        return {(t, c, int(e)): int(p) for t, c, e, p in rows}

    def _history(self, conn: psycopg.Connection, streams: list[Stream]) -> set[Stream]:
        """Step 2's streams: of an epoch below the catalog's current one or below a
        fence the product side settled."""
        below = superseded_catalogs(conn)
        current = self._epochs.epochs({(t, c) for t, c, _ in streams}, refresh=True)
        for pair, epoch in current.items():
            below[pair] = max(epoch, below.get(pair, epoch))
        return {s for s in streams if s[2] < below.get((s[0], s[1]), s[2])}

    def report_once(self) -> int:
        """Steps 1-4; returns how many streams the resolver acknowledged."""
        sent = 0
        with psycopg.connect(self._dsn, autocommit=True) as conn:
            progress = self._progress(conn)
            standing = {r.stream: r for r in report_refusals.listed(conn, self._consumer)}
            history = self._history(conn, sorted(progress))
            for stream, position in sorted(progress.items()):
                refusal = standing.get(stream)
                if stream in history:
                    if refusal is not None:
                        report_refusals.clear(conn, self._consumer, stream)
                        del standing[stream]
                    if self.reported.pop(stream, None) is not None:
                        REPORTED.remove(*map(str, stream))
                    continue
                if position <= self.reported.get(stream, -1) or (
                    refusal is not None
                    and refusal.code == NEEDS_REBUILD_CODE
                    and refusal.position == position
                ):
                    continue
                try:
                    held = self._client.report_progress(stream, self._consumer, position)
                except ResolverUnavailable as exc:
                    log.warning("progress report deferred: %s", exc)
                    break
                except ResolverRefused as exc:
                    log.error(
                        "stream %s: progress %d refused (%s); the other streams go on: %s",
                        stream,
                        position,
                        exc.resolver_code,
                        exc.message,
                    )
                    standing[stream] = report_refusals.record(
                        conn, self._consumer, stream, position, exc.resolver_code, exc.message
                    )
                    continue
                if refusal is not None:
                    report_refusals.clear(conn, self._consumer, stream)
                    del standing[stream]
                self.reported[stream] = max(held, self.reported.get(stream, -1))
                REPORTED.labels(*map(str, stream)).set(self.reported[stream])
                sent += 1
        self._show(standing)
        return sent

    def _show(self, standing: dict[Stream, Refusal]) -> None:
        """Step 4 (and the per-stream ``gapless_consumer_needs_rebuild``), and
        ``refused`` for callers."""
        self.refused = {s: r.position for s, r in standing.items()}
        needs = {s for s, r in standing.items() if r.code == NEEDS_REBUILD_CODE}
        for stream in self._needs_rebuild - needs:
            NEEDS_REBUILD.labels(*map(str, stream)).set(0)
        for stream in needs:
            NEEDS_REBUILD.labels(*map(str, stream)).set(1)
        self._needs_rebuild |= needs
        counts = Counter(r.code for r in standing.values())
        for code in self._codes - counts.keys():
            REFUSED.labels(code).set(0)
        for code, n in counts.items():
            REFUSED.labels(code).set(n)
        self._codes |= counts.keys()
