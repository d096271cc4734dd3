"""What a rebuild costs live traffic: the commit → apply latency of the live writes.

The same measure as ``infra.bench.deployed_latency``: an event's latency is its inbox
row's ``decided_at`` (the live consumer's applying transaction) minus its outbox
row's ``committed_at`` (the writing transaction), both on the one PostgreSQL
server's clock. A window is two readings of that clock (``server_now``); the events
of a window are the stream's outbox rows committed in it. Read them once the live
consumer has applied every committed position (the bench waits for it). The events
of (L, H] at a cutover (the live consumer's progress L when the swap paused it, the
swap's H) are the exception: the shadow applied them, and the live consumer serves
them from the swap's COMMIT on without an inbox row of its own, so their apply time
is the swap's (the rebuild row's ``updated_at`` as the swap wrote it, just before its
COMMIT). Any other event with no inbox row is an error, not a fast one. Nothing is
written. While the bench follows the rebuild, ``SwapSeen`` keeps that swap from the
rebuild row and ``PhaseClock`` when the rebuild entered each phase (the window's p99
per phase).

Two windows are compared: the rebuild's (from its request to ``done``) and a
baseline at the same rate just before it, with no rebuild running. Their p99s'
ratio is ``rebuild_live_p99_ratio`` (target ≤ 2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import psycopg

from db.product.rebuilds import RebuildRow
from infra.bench.latency import percentile

P99_RATIO_TARGET = 2.0


@dataclass(frozen=True, slots=True)
class Window:
    start: datetime
    end: datetime

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


@dataclass(frozen=True, slots=True)
class LiveLatency:
    events: int
    eps: float
    """Events committed per second of the window."""
    p50_ms: float
    p99_ms: float
    max_ms: float
    by_cutover: int = 0
    """Events the live consumer served from the cutover on (applied by the shadow)."""
    p99_by_quarter_ms: tuple[float, ...] = ()
    """The p99 of the events committed in each quarter of the window (where a spike is)."""
    p99_by_phase_ms: dict[str, float] = field(default_factory=dict)
    """The p99 of the events committed in each phase of the rebuild (``phases``)."""


@dataclass(frozen=True, slots=True)
class Swap:
    """A cutover as the live consumer saw it: H, and when the swap committed."""

    target: int
    at: datetime


class SwapSeen:
    """The swap as the rebuild row recorded it: H, and its ``updated_at`` in the swap's
    transaction (read before the rebuild moves on; once ``done`` is all there is, its
    time is a little later than the swap's)."""

    def __init__(self) -> None:
        self.swap: Swap | None = None

    def observe(self, row: RebuildRow) -> None:
        if self.swap is None and row.previous_generation is not None:
            assert row.target_position is not None
            self.swap = Swap(row.target_position, row.updated_at)


class PhaseClock:
    """When the bench first saw the rebuild in each phase (its poll's resolution)."""

    def __init__(self) -> None:
        self.entered: list[tuple[str, datetime]] = []

    def observe(self, row: RebuildRow) -> None:
        if not self.entered or self.entered[-1][0] != row.phase:
            self.entered.append((row.phase, datetime.now(UTC)))


def server_now(dsn: str) -> datetime:
    """The PostgreSQL server's clock (the clock ``committed_at`` and ``decided_at`` use)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def summarize(
    latencies_ms: list[float],
    seconds: float,
    by_cutover: int = 0,
    quarters: Sequence[list[float]] = (),
    by_phase: Mapping[str, list[float]] | None = None,
) -> LiveLatency:
    """Percentiles (nearest rank, as every bench reports them) of one window's events
    (``quarters``, ``by_phase``: the same latencies by the quarter of the window, and
    the rebuild phase, they were committed in)."""
    if not latencies_ms:
        return LiveLatency(0, 0.0, 0.0, 0.0, 0.0)
    return LiveLatency(
        len(latencies_ms),
        len(latencies_ms) / seconds if seconds > 0 else 0.0,
        percentile(latencies_ms, 50),
        percentile(latencies_ms, 99),
        max(latencies_ms),
        by_cutover,
        tuple(percentile(q, 99) if q else 0.0 for q in quarters),
        {phase: percentile(ms, 99) for phase, ms in (by_phase or {}).items() if ms},
    )


def p99_ratio(during: LiveLatency, baseline: LiveLatency) -> float:
    """The rebuild window's p99 over the baseline's; 0 when either measured nothing."""
    if during.events == 0 or baseline.events == 0 or baseline.p99_ms <= 0:
        return 0.0
    return during.p99_ms / baseline.p99_ms


def latencies_ms(
    resolver_dsn: str,
    product_dsn: str,
    tenant: str,
    consumer: str,
    window: Window,
    swap: Swap | None = None,
) -> tuple[list[tuple[datetime, float]], int]:
    """(commit time, commit → apply ms) of every event of ``tenant`` committed in
    ``window``, and how many of them the live consumer got from ``swap`` (see the
    module docstring)."""
    with psycopg.connect(resolver_dsn, autocommit=True) as conn:
        committed: dict[str, tuple[int, datetime]] = {
            str(e): (int(position), at)
            for e, position, at in conn.execute(
                "SELECT event_id, position, committed_at FROM outbox WHERE tenant_id = %s"
                " AND committed_at >= %s AND committed_at < %s",
                (tenant, window.start, window.end),
            ).fetchall()
        }
    if not committed:
        return [], 0
    with psycopg.connect(product_dsn, autocommit=True) as conn:
        applied: dict[str, datetime] = {
            str(e): at
            for e, at in conn.execute(
                "SELECT event_id, decided_at FROM inbox WHERE consumer = %s"
                " AND event_id = ANY(%s::uuid[])",
                (consumer, list(committed)),
            ).fetchall()
        }
    by_cutover = 0
    for e, (position, _at) in committed.items():
        if e not in applied and swap is not None and position <= swap.target:
            applied[e] = swap.at
            by_cutover += 1
    missing = committed.keys() - applied.keys()
    if missing:
        raise RuntimeError(
            f"{len(missing)} of the {len(committed)} live events committed in the window"
            f" have no inbox row of {consumer}"
        )
    timed = [(at, (applied[e] - at).total_seconds() * 1000) for e, (_p, at) in committed.items()]
    return timed, by_cutover


def measure(
    resolver_dsn: str,
    product_dsn: str,
    tenant: str,
    consumer: str,
    window: Window,
    swap: Swap | None = None,
    phases: Sequence[tuple[str, datetime]] = (),
) -> LiveLatency:
    """The window's figures; ``phases``: when the rebuild entered each phase, in order."""
    found, by_cutover = latencies_ms(resolver_dsn, product_dsn, tenant, consumer, window, swap)
    quarters, by_phase = slices(found, window, phases)
    return summarize([ms for _at, ms in found], window.seconds, by_cutover, quarters, by_phase)


def slices(
    found: Sequence[tuple[datetime, float]],
    window: Window,
    phases: Sequence[tuple[str, datetime]] = (),
) -> tuple[list[list[float]], dict[str, list[float]]]:
    """The latencies by the quarter of ``window`` and by the phase (the last entered at
    or before) their events were committed in; events before the first phase in none."""
    quarters: list[list[float]] = [[], [], [], []]
    by_phase: dict[str, list[float]] = {name: [] for name, _ in phases}
    for at, ms in found:
        share = (at - window.start).total_seconds() / window.seconds if window.seconds else 0.0
        quarters[min(3, max(0, int(share * 4)))].append(ms)
        entered = [name for name, since in phases if since <= at]
        if entered:
            by_phase[entered[-1]].append(ms)
    return quarters, by_phase
