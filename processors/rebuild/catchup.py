"""Catch-up phase: the shadow applies the retained events after W, under the lease.

The shadow is an ``Applier`` under the rebuild's own consumer name, whose progress
row (started at W by the load) points at the new generation. It has the live path's
dedupe, revision checks and dependency parking, all kept per consumer, and it never
reads or moves the live consumer's rows. Each round:

1. fetch a page after the fetch cursor (the shadow's durable progress at first) from
   ``GET /v1/exports/events`` under the lease (a 410 reaches the orchestrator, which
   starts over with a new export);
2. apply it through the shadow applier: one transaction; the shadow's progress moves
   contiguously and never past a parked or quarantined position;
3. the first page that reaches the stream's committed position names the target H
   (that committed position); the caller records it on the rebuild row once;
4. the shadow is caught up once its progress is at or past H.

The catch-up may be throttled (``Throttle``): the shadow applies in the same agents
process as the live consumers, and unthrottled (about 2,000 events/s on two cores) it
starves them of CPU. A throttle of R events/s caps each page at what R allows in
``SLICE_SECONDS`` (half a second) and, after each page, waits until the events
applied since the round began no longer run ahead of R. The catch-up still ends as
long as R is above the stream's live write rate W: no target is chosen before a page
comes back short, so the shadow must gain on a head that moves at W; it gains R - W
events a second, and a lag L closes in about L / (R - W) seconds. Only this phase is throttled: the
unpaused catch-up and the swap of the cutover are not (the swap holds a pause).
The throttle keeps no state beyond one call: a crash or a restart only starts the
next round's pacing afresh.

A crash anywhere leaves the shadow's committed batches and progress: the next round
starts after that progress (a page applied twice is only duplicates). A shadow whose
progress row is gone (its rebuild restarted, cancelled or cleaned up while a page
was on its way) raises ``ShadowProgressLost`` and writes nothing: the shadow applier
never makes its own row (``processors.applier.progress.lock``). A shadow
stuck below H, behind a position that stays parked or quarantined, is reported with
what holds it (``blocker``), and the rebuild waits in this phase for the operator's
repair of the shadow consumer's entry (``gapless quarantine``/``gapless parked``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from db.product import cutover as sql
from processors.applier.batch import Applier
from processors.applier.exceptions import ShadowProgressLost
from processors.applier.messages import RawMessage
from processors.gaps import retained_topic
from processors.resolver_client import ResolverClient
from schemas.ids import StreamId

SLICE_SECONDS = 0.5
"""A throttled page holds at most this long's worth of the rate, so the shadow's
transactions come as slices between the live consumers' batches. Not much shorter:
every page costs a fetch, a transaction and the caller's claim and lease renewal
(``on_page``) whatever its size, and at 0.1 s (pages of 50 at 500 events/s) that
overhead cost the live consumers as much as the throttle saved them."""


@dataclass(frozen=True, slots=True)
class Throttle:
    """A cap of ``events_per_second`` on the catch-up (0: unthrottled)."""

    events_per_second: float = 0.0

    def page(self, page_size: int) -> int:
        """The page size under the throttle: at most ``SLICE_SECONDS`` of the rate."""
        if self.events_per_second <= 0:
            return page_size
        return max(1, min(page_size, math.ceil(self.events_per_second * SLICE_SECONDS)))

    def wait(self, applied: int, elapsed: float) -> float:
        """Seconds to wait before the next page, ``applied`` events having been
        applied in ``elapsed`` seconds, for the round not to run ahead of the rate."""
        if self.events_per_second <= 0:
            return 0.0
        return max(0.0, applied / self.events_per_second - elapsed)


UNTHROTTLED = Throttle()


@dataclass(frozen=True, slots=True)
class CatchUp:
    progress: int
    target: int | None
    fetched: int
    blocker: str | None = None

    @property
    def caught_up(self) -> bool:
        return self.target is not None and self.progress >= self.target


def fetch_and_apply(
    client: ResolverClient,
    shadow: Applier,
    lease_id: str,
    stream: StreamId,
    after: int,
    page_size: int,
) -> tuple[int, int, int, int]:
    """Steps 1-2 once: (events fetched, last position fetched, committed position,
    the shadow's durable progress after the batch). ``after`` is a fetch cursor,
    which may run ahead of the progress (past a quarantined position): the progress
    returned is always the shadow's own, read back when the page was empty."""
    page = client.export_events(lease_id, stream.history_epoch, after, page_size)
    progress: int | None = None
    if page.events:
        origin = retained_topic(stream)
        result = shadow.apply(
            [
                RawMessage(origin, -1, e.position, e.key, e.value, stream, e.position)
                for e in page.events
            ]
        )
        progress = result.progress.get(stream)
    if progress is None:
        progress = _progress(shadow, stream)
    last = page.events[-1].position if page.events else after
    return len(page.events), last, page.committed_position, progress


def catch_up(
    client: ResolverClient,
    shadow: Applier,
    lease_id: str,
    stream: StreamId,
    target: int | None,
    *,
    page_size: int = 2000,
    budget_seconds: float = 10.0,
    on_page: Callable[[int], None] = lambda _progress: None,
    throttle: Throttle = UNTHROTTLED,
    before_page: Callable[[], object] = lambda: None,
) -> CatchUp:
    """Rounds of steps 1-3 until the shadow is caught up, it is stuck, or the time
    budget is spent (the caller renews its claim and the lease in ``on_page`` and
    calls again); under ``throttle``, in its smaller pages, paced; ``before_page``
    before each page (the live consumers' turn: ``processors.live_first``)."""
    progress = cursor = _progress(shadow, stream)
    fetched = 0
    page_size = throttle.page(page_size)
    began = time.monotonic()
    deadline = began + budget_seconds
    while True:
        before_page()
        n, last, committed, after_batch = fetch_and_apply(
            client, shadow, lease_id, stream, cursor, page_size
        )
        fetched += n
        progress = max(progress, after_batch)
        cursor = max(cursor, last, progress)
        if target is None and n < page_size:
            target = committed
        on_page(progress)
        if target is not None and progress >= target:
            return CatchUp(progress, target, fetched)
        if n == 0 and cursor >= committed:
            # Everything committed was fetched, yet progress is short of it: a
            # position above progress stays parked or quarantined for the shadow.
            return CatchUp(progress, target, fetched, _blocker(shadow, stream, progress))
        now = time.monotonic()
        if now >= deadline:
            return CatchUp(progress, target, fetched)
        pause = min(throttle.wait(fetched, now - began), deadline - now)
        if pause > 0:
            time.sleep(pause)


def _progress(shadow: Applier, stream: StreamId) -> int:
    """The shadow's durable progress; its row, which the load made, must be there."""
    with psycopg.connect(shadow.product_dsn) as conn:
        position = sql.progress_of(conn, shadow.consumer, stream)
    if position is None:
        raise ShadowProgressLost(f"shadow {shadow.consumer} has no progress row of {stream}")
    return position


def _blocker(shadow: Applier, stream: StreamId, progress: int) -> str:
    with psycopg.connect(shadow.product_dsn) as conn:
        held = sql.held_above(conn, shadow.consumer, stream, progress)
    if held.quarantine_id is not None:
        return (
            f"position {progress + 1} and later wait on quarantine entry #{held.quarantine_id}"
            f" ({held.quarantine_code}) of consumer {shadow.consumer}: retry or skip it"
            " (gapless quarantine)"
        )
    if held.parked:
        return (
            f"position {progress + 1}: {held.parked} event(s) of consumer {shadow.consumer}"
            f" parked from position {held.first_parked} on a dependency that never came"
            " (gapless parked list)"
        )
    return f"position {progress + 1} has no terminal outcome for {shadow.consumer} yet"
