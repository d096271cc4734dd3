"""Closing gaps from the resolver's retained events.

A position above a stream's durable progress that stays missing (a message lost from
Kafka, never published, or stuck behind a rebalance) holds progress, and events
parked on it may wait forever. The gap closer fetches the events after progress from
the resolver and applies them through the normal batch path, so dedupe, revisions and
parking apply unchanged. Parked and quarantined events never close a gap: only an
event with a terminal outcome moves progress.

The streams come from the resolver, not only from this consumer's progress rows: a
stream whose every message was lost before this consumer saw any (or that was
written before this consumer was deployed) has no progress row here, yet the
resolver retains its events for a standing consumer; it is filled from position 0.
Streams the resolver says are caught up (committed = progress) are not fetched.
When the resolver's list is unavailable, the local progress rows are used alone.
A stream of an epoch a settled fence superseded (``superseded_epoch``) is history: it
is never filled (every event of it would only be ignored, and once the resolver has
pruned it after the fenced retention period, asking would raise a false rebuild
alarm for a dead stream).
A stream of an epoch not released for this consumer (no progress row of a later
epoch than the first: no cutover at it yet, ``processors.applier.deferred``) is not
filled either: its events would only be held.
A retained copy whose bytes an operator already skipped (an undecodable message) is
recorded skipped, not quarantined again.

Each pass first hands back the deliveries the applier kept aside that are now due
(``hand_back_deferred``: a paused catalog's after its resume, a held epoch's after
its cutover), so what Kafka delivered once is judged before a retained copy of it
is fetched.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from urllib.parse import quote

import psycopg

from db.control.epochs import FIRST_EPOCH
from db.control.pauses import PauseWatch
from db.product.inbox_pruning import superseded_catalogs
from processors.applier import deferred
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from processors.applier.progress import Stream
from processors.applier.tallies import BatchResult
from processors.exceptions import ResolverUnavailable, RetainedEventsGone
from processors.reporter import NEEDS_REBUILD
from processors.resolver_client import ResolverClient
from schemas.logs import event_fields

log = logging.getLogger(__name__)

RETAINED_TOPIC = "resolver.retained-events"


def retained_topic(stream: Stream) -> str:
    """The origin a retained copy is recorded under (quarantine, outcomes): one per
    stream, so copies of two streams at one position never collide."""
    t, c, e = stream
    return f"{RETAINED_TOPIC}/{quote(t, safe='')}/{quote(c, safe='')}/{e}"


@dataclass
class _Seen:
    position: int
    since: float


@dataclass
class GapCloser:
    """Finds stalled streams and fills them from retained events.

    A stream is a candidate when the resolver has committed past this consumer's
    progress (0 for a stream it has never seen) and, for at least ``threshold_s``:
    - the inbox holds a position above progress (a hole below it, or a parked event), or
    - progress has not moved (the resolver holds events this consumer never got).
    """

    product_dsn: str
    client: ResolverClient
    applier: Applier
    consumer: str
    threshold_s: float = 5.0
    page_size: int = 500
    pauses: PauseWatch | None = None  # a paused catalog's gaps wait for the resume
    _seen: dict[Stream, _Seen] = field(default_factory=dict)
    # Streams pruned past this consumer's progress, by that progress: not asked
    # again until the progress moves (a rebuild).
    _gone: dict[Stream, int] = field(default_factory=dict)

    def _streams(self) -> tuple[dict[Stream, int], set[Stream], dict[tuple[str, str], int]]:
        """Each stream's progress, the streams with inbox rows above it for long, and
        per catalog the epoch below which its streams are superseded."""
        with psycopg.connect(self.product_dsn) as conn:
            superseded = superseded_catalogs(conn)
            progress = {
                (t, c, int(e)): int(p)
                for t, c, e, p in conn.execute(
                    "SELECT tenant_id, catalog_id, history_epoch, position FROM stream_progress"
                    " WHERE consumer = %s",
                    (self.consumer,),
                ).fetchall()
            }
            waiting = {
                (t, c, int(e))
                for t, c, e in conn.execute(
                    "SELECT DISTINCT p.tenant_id, p.catalog_id, p.history_epoch"
                    " FROM stream_progress p JOIN inbox i ON i.consumer = p.consumer"
                    " AND i.tenant_id = p.tenant_id"
                    " AND i.catalog_id = p.catalog_id AND i.history_epoch = p.history_epoch"
                    " AND i.position > p.position"
                    " WHERE p.consumer = %s AND i.received_at < now() - make_interval(secs => %s)",
                    (self.consumer, self.threshold_s),
                ).fetchall()
            }
        return progress, waiting, superseded

    def _behind(self, progress: dict[Stream, int]) -> set[Stream] | None:
        """The streams the resolver has committed past ``progress`` (adding the ones
        never seen here to ``progress`` at 0), or None if it did not answer."""
        try:
            known = self.client.streams()
        except ResolverUnavailable as exc:
            log.warning("stream list unavailable, using local progress only: %s", exc)
            return None
        behind = set()
        for s in known:
            if s.committed > progress.setdefault(s.stream, 0):
                behind.add(s.stream)
            elif progress[s.stream] == 0:
                del progress[s.stream]  # nothing committed and nothing seen: skip it
        return behind

    def candidates(self, now: float | None = None) -> dict[Stream, int]:
        now = time.monotonic() if now is None else now
        progress, waiting, superseded = self._streams()
        own = set(progress)
        behind = self._behind(progress)
        stalled: dict[Stream, int] = {}
        for stream, position in progress.items():
            if behind is not None and stream not in behind:
                continue
            if stream[2] < superseded.get((stream[0], stream[1]), 0):
                continue
            if stream[2] > FIRST_EPOCH and stream not in own:
                continue  # its epoch is held until a cutover at it creates the row
            gone = self._gone.get(stream)
            if gone == position:
                continue
            if gone is not None:  # progress moved (a rebuild): ask again
                del self._gone[stream]
                NEEDS_REBUILD.labels(*map(str, stream)).set(0)
            seen = self._seen.get(stream)
            if seen is None or seen.position != position:
                self._seen[stream] = _Seen(position, now)
                seen = self._seen[stream]
            if stream in waiting or now - seen.since >= self.threshold_s:
                stalled[stream] = position
        return stalled

    def close_stream(self, stream: Stream, after: int) -> BatchResult | None:
        """Fetch one page after ``after`` and apply it; None when nothing was retained."""
        page = self.client.retained_events(stream, after, self.page_size)
        if not page.events:
            return None
        # The resolver vouches for each copy's stream and position, so one that does not
        # decode is still known by them: skipped once, it is never put back in front of
        # the operator, and progress may pass it.
        messages = [
            RawMessage(retained_topic(stream), -1, e.position, e.key, e.value, stream, e.position)
            for e in page.events
        ]
        return self.applier.apply(messages)

    def hand_back_deferred(self) -> BatchResult:
        """Hand the due deliveries the applier kept aside back to it, a page at a time
        (``processors.applier.deferred``: the steps and what a crash leaves), until
        none is due or a page was only kept aside again (its catalog paused anew)."""
        total = BatchResult()
        paused = self.pauses.paused_keys() if self.pauses is not None else frozenset()
        while True:
            with psycopg.connect(self.product_dsn) as conn:
                page = deferred.due(
                    conn, self.consumer, paused, self.applier.current_epochs, self.page_size
                )
            if not page:
                return total
            result = self.applier.apply(page)
            total.add(result)
            log.info(
                "handed back %d deferred deliveries: applied %d, ignored %d, duplicates %d,"
                " kept aside again %d",
                len(page),
                result.applied,
                result.ignored,
                result.duplicates,
                result.deferred + result.held,
            )
            if len(page) < self.page_size or result.deferred + result.held >= len(page):
                return total

    def close_once(self) -> dict[Stream, BatchResult]:
        """One pass: the due deferred deliveries first, then the stalled streams;
        returns what was applied per stream (the stalled ones)."""
        self.hand_back_deferred()
        results: dict[Stream, BatchResult] = {}
        paused = self.pauses.paused_keys() if self.pauses is not None else frozenset()
        for stream, position in self.candidates().items():
            if (stream[0], stream[1]) in paused:
                continue
            try:
                result = self.close_stream(stream, position)
            except ResolverUnavailable as exc:
                log.warning("gap closing deferred: %s", exc)
                break
            except RetainedEventsGone as exc:
                log.error(
                    "stream %s: events after %d were pruned (%s); a rebuild is needed",
                    stream,
                    position,
                    exc,
                    extra=event_fields(stream, position + 1),
                )
                self._gone[stream] = position
                NEEDS_REBUILD.labels(*map(str, stream)).set(1)
                continue
            if result is None:
                # Nothing retained after progress: not a gap, just a quiet stream.
                self._seen[stream] = _Seen(position, time.monotonic())
                continue
            results[stream] = result
            log.info(
                "stream %s: filled from retained events after %d: applied %d, duplicates %d",
                stream,
                position,
                result.applied,
                result.duplicates,
                extra=event_fields(stream, position + 1),
            )
        return results
