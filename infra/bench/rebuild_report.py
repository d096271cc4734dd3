"""The rebuild phase's figures as one flat JSON object or a table for people."""

from __future__ import annotations

from dataclasses import dataclass, field

from infra.bench.machine import load_line
from infra.bench.rebuild_live import P99_RATIO_TARGET, LiveLatency, p99_ratio
from infra.bench.rebuild_takeover import TAKEOVER_TARGET_S, Takeover, worst

RTO_TARGET_S = 60.0
LOAD_RATIO_TARGET = 0.5
PAUSE_TARGET_MS = 100.0
RSS_TARGET_MB = 1024.0
NO_LATENCY = LiveLatency(0, 0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class Memory:
    """One deployed process (and its children): resident MB before the rebuild was
    requested, and the peak from the request to the end of the load."""

    before_mb: float
    peak_mb: float


@dataclass(frozen=True, slots=True)
class RebuildFigures:
    items: int
    rows_loaded: int
    """Export records the load wrote (each one row of its kind's projection)."""
    chunks: int
    attempts: int
    rto_s: float
    """From publishing the request to the bench seeing the rebuild ``done``."""
    phases_s: dict[str, float]
    """Seconds per phase, as the rebuild row's ``timings`` recorded them."""
    export_write_s: float
    """The resolver's own export time: the export row's creation to ``ready``."""
    cutover_pause_ms: float
    catchup_events: int
    """Positions the shadow applied after W (through the cutover's H)."""
    live_events: int
    """Events the live writer committed from the request to ``done``."""
    bare_copy_rows: int
    """Rows of every kind the baseline copied (the load's rows: records and documents)."""
    bare_copy_s: float
    """Every table's COPYs and COMMITs."""
    api: Memory
    agents: Memory
    step_interval_s: float
    rows_checked: int
    environment: dict[str, object] = field(default_factory=dict)
    bare_copy_items_s: float = 0.0
    """The item rows' COPYs alone (the baseline before the other kinds counted)."""
    bare_copy_item_rows: int = 0
    load_rows: int = 0
    """Rows the load wrote: its records and the search documents of its items (0:
    not known, the records alone count)."""
    rows: int = 0
    """Rows of every kind in the rebuilt generation once the live consumer serves it."""
    rows_by_table: dict[str, int] = field(default_factory=dict)
    rows_checked_by: dict[str, int] = field(default_factory=dict)
    """Accepted rows compared, per projection."""
    live: LiveLatency = NO_LATENCY
    """Commit → apply of the live writes from the request to ``done``."""
    baseline: LiveLatency = NO_LATENCY
    """The same, at the same rate, with no rebuild running (just before it)."""
    baseline_s: float = 0.0
    live_eps_offered: float = 0.0
    takeovers: tuple[Takeover, ...] = ()
    eta_error_pct: float | None = None
    agents_workers: int = 1
    mix: dict[str, float] = field(default_factory=dict)
    """Accepted rows per seeded item, by kind."""
    load_s_by_kind: dict[str, float] = field(default_factory=dict)
    """Seconds of the load's chunks, shared among the kinds of record they held (the
    rebuild row's ``load_cost``)."""

    def phase(self, name: str) -> float:
        return self.phases_s.get(name, 0.0)

    @property
    def written_rows(self) -> int:
        return self.load_rows or self.rows_loaded

    @property
    def load_eps(self) -> float:
        load = self.phase("loading")
        return self.written_rows / load if load > 0 else 0.0

    @property
    def bare_copy_eps(self) -> float:
        return self.bare_copy_rows / self.bare_copy_s if self.bare_copy_s > 0 else 0.0

    @property
    def load_ratio(self) -> float:
        return self.load_eps / self.bare_copy_eps if self.bare_copy_eps > 0 else 0.0

    @property
    def bare_copy_items_only_eps(self) -> float:
        s = self.bare_copy_items_s
        rows = self.bare_copy_item_rows or self.bare_copy_rows
        return rows / s if s > 0 else 0.0

    @property
    def load_ratio_items_only(self) -> float:
        eps = self.bare_copy_items_only_eps
        return self.load_eps / eps if eps > 0 else 0.0

    @property
    def live_p99_ratio(self) -> float:
        return p99_ratio(self.live, self.baseline)

    @property
    def takeover_s(self) -> float | None:
        return worst(self.takeovers)

    @property
    def peak_rss_mb(self) -> float:
        return max(self.api.peak_mb, self.agents.peak_mb)

    def as_dict(self) -> dict[str, object]:
        takeover = self.takeover_s
        return {
            "rebuild_items": self.items,
            "rebuild_rows": self.rows,
            "rebuild_export_s": round(self.phase("exporting"), 2),
            "rebuild_load_s": round(self.phase("loading"), 2),
            "rebuild_catchup_s": round(self.phase("catching_up"), 2),
            "rebuild_cutover_pause_ms": round(self.cutover_pause_ms, 1),
            "rebuild_rto_s": round(self.rto_s, 2),
            "rebuild_load_eps": round(self.load_eps, 1),
            "rebuild_bare_copy_eps": round(self.bare_copy_eps, 1),
            "rebuild_load_ratio": round(self.load_ratio, 3),
            "rebuild_peak_rss_mb": round(self.peak_rss_mb, 1),
            "rebuild_live_p99_ms": round(self.live.p99_ms, 1),
            "baseline_live_p99_ms": round(self.baseline.p99_ms, 1),
            "rebuild_live_p99_ratio": round(self.live_p99_ratio, 3),
            "rebuild_takeover_s": None if takeover is None else round(takeover, 2),
            "rebuild_eta_error_pct": (
                None if self.eta_error_pct is None else round(self.eta_error_pct, 1)
            ),
            "rebuild_requested_s": round(self.phase("requested"), 2),
            "rebuild_leased_s": round(self.phase("leased"), 2),
            "rebuild_cutover_s": round(self.phase("cutting_over"), 2),
            "rebuild_export_write_s": round(self.export_write_s, 2),
            "rebuild_rows_loaded": self.rows_loaded,
            "rebuild_load_rows": self.written_rows,
            "rebuild_rows_by_table": dict(self.rows_by_table),
            "rebuild_load_s_by_kind": {k: round(v, 2) for k, v in self.load_s_by_kind.items()},
            "rebuild_mix_per_item": dict(self.mix),
            "rebuild_chunks": self.chunks,
            "rebuild_attempts": self.attempts,
            "rebuild_catchup_events": self.catchup_events,
            "rebuild_live_events": self.live_events,
            "rebuild_live_eps_offered": self.live_eps_offered,
            "rebuild_live_eps": round(self.live.eps, 1),
            "rebuild_live_events_timed": self.live.events,
            "rebuild_live_events_by_cutover": self.live.by_cutover,
            "rebuild_live_p50_ms": round(self.live.p50_ms, 1),
            "rebuild_live_max_ms": round(self.live.max_ms, 1),
            "baseline_live_s": round(self.baseline_s, 1),
            "baseline_live_eps": round(self.baseline.eps, 1),
            "baseline_live_events": self.baseline.events,
            "baseline_live_p50_ms": round(self.baseline.p50_ms, 1),
            "baseline_live_max_ms": round(self.baseline.max_ms, 1),
            "rebuild_live_p99_by_quarter_ms": [round(x, 1) for x in self.live.p99_by_quarter_ms],
            "rebuild_live_p99_by_phase_ms": {
                k: round(v, 1) for k, v in self.live.p99_by_phase_ms.items()
            },
            "baseline_live_p99_by_quarter_ms": [
                round(x, 1) for x in self.baseline.p99_by_quarter_ms
            ],
            "rebuild_takeover_by_phase_s": {
                t.phase: None if t.seconds is None else round(t.seconds, 2) for t in self.takeovers
            },
            "rebuild_agents_workers": self.agents_workers,
            "rebuild_bare_copy_rows": self.bare_copy_rows,
            "rebuild_bare_copy_s": round(self.bare_copy_s, 2),
            "rebuild_bare_copy_items_only_eps": round(self.bare_copy_items_only_eps, 1),
            "rebuild_load_ratio_items_only": round(self.load_ratio_items_only, 3),
            "rebuild_api_rss_before_mb": round(self.api.before_mb, 1),
            "rebuild_api_peak_rss_mb": round(self.api.peak_mb, 1),
            "rebuild_agents_rss_before_mb": round(self.agents.before_mb, 1),
            "rebuild_agents_peak_rss_mb": round(self.agents.peak_mb, 1),
            "rebuild_step_interval_s": self.step_interval_s,
            "rebuild_rows_checked": self.rows_checked,
            "rebuild_rows_checked_by": dict(self.rows_checked_by),
            **self.environment,
        }


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _takeover_lines(figures: RebuildFigures) -> list[str]:
    if not figures.takeovers:
        return ["  takeover: not measured (no --kill-phase)"]
    worst_s = figures.takeover_s
    each = ", ".join(
        f"{t.phase} {'missed' if t.seconds is None else f'{t.seconds:.2f} s'}"
        for t in figures.takeovers
    )
    verdict = (
        "none measured"
        if worst_s is None
        else f"worst {worst_s:.2f} s (target <= {TAKEOVER_TARGET_S:.0f} s:"
        f" {_verdict(worst_s <= TAKEOVER_TARGET_S)})"
    )
    return [
        "  takeover after kill -9 of the worker carrying a rebuild, one per phase:"
        f" {each}; {verdict}"
    ]


def render_rebuild_table(figures: RebuildFigures) -> str:
    d = figures.as_dict()
    env = figures.environment
    load_ratio = float(str(d["rebuild_load_ratio"]))
    rto = float(str(d["rebuild_rto_s"]))
    pause = float(str(d["rebuild_cutover_pause_ms"]))
    ratio = figures.live_p99_ratio
    eta = figures.eta_error_pct
    mix = ", ".join(f"{v:g} {k}" for k, v in figures.mix.items())
    lines = [
        f"gapless bench rebuild: {figures.items:,} items ({figures.rows:,} rows in the rebuilt"
        f" generation), {figures.agents_workers} agents workers, {env.get('cores', '?')} cores,"
        f" PostgreSQL {env.get('postgres', '?')}"
        f" (synchronous_commit={env.get('synchronous_commit', '?')}),"
        f" {load_line(env)}",
        *([f"  per item: {mix}"] if mix else []),
        "",
        "  phase (as the rebuild row records it)      seconds",
        f"  requested (the request taken, a lease)    {figures.phase('requested'):>8.2f}",
        f"  leased (the export asked for)             {figures.phase('leased'):>8.2f}",
        f"  exporting                                 {figures.phase('exporting'):>8.2f}"
        f"   (the resolver wrote it in {figures.export_write_s:.2f} s)",
        f"  loading                                   {figures.phase('loading'):>8.2f}"
        f"   ({figures.rows_loaded:,} records, {figures.written_rows:,} rows with the"
        f" documents, in {figures.chunks} chunks)",
        *(
            [
                "    of which, by kind of record: "
                + ", ".join(f"{k} {v:.2f}" for k, v in figures.load_s_by_kind.items())
            ]
            if figures.load_s_by_kind
            else []
        ),
        f"  catching up                               {figures.phase('catching_up'):>8.2f}"
        f"   ({figures.catchup_events:,} positions after W)",
        f"  cutting over                              {figures.phase('cutting_over'):>8.2f}",
        f"  whole rebuild, request to done (RTO)      {figures.rto_s:>8.2f}"
        f"   target <= {RTO_TARGET_S:.0f} s for 1,000,000 items"
        + (f": {_verdict(rto <= RTO_TARGET_S)}" if figures.items >= 1_000_000 else ""),
        "",
        f"  load {figures.load_eps:,.0f} rows/s vs a bare COPY of the same rows (every kind,"
        f" documents included) {figures.bare_copy_eps:,.0f} rows/s: ratio {load_ratio:.2f}"
        f" (target >= {LOAD_RATIO_TARGET}: {_verdict(load_ratio >= LOAD_RATIO_TARGET)});"
        f" against the item rows alone {figures.bare_copy_items_only_eps:,.0f} rows/s:"
        f" {figures.load_ratio_items_only:.2f}",
        f"  the live applier paused {pause:.1f} ms at cutover (target <= {PAUSE_TARGET_MS:.0f} ms:"
        f" {_verdict(pause <= PAUSE_TARGET_MS)})",
        f"  resolver API RSS {figures.api.before_mb:.0f} MB before, peak"
        f" {figures.api.peak_mb:.0f} MB during export and load; agents"
        f" {figures.agents.before_mb:.0f} MB before, peak {figures.agents.peak_mb:.0f} MB"
        f" (target <= {RSS_TARGET_MB:.0f} MB:"
        f" {_verdict(figures.peak_rss_mb <= RSS_TARGET_MB)})",
        f"  live writes ({figures.live_eps_offered:g} events/s offered) commit -> apply p99:"
        f" {figures.live.p99_ms:,.1f} ms during the rebuild ({figures.live.events:,} events,"
        f" {figures.live.eps:,.0f}/s) vs {figures.baseline.p99_ms:,.1f} ms with none running"
        f" ({figures.baseline.events:,} events in {figures.baseline_s:.0f} s): ratio"
        f" {ratio:.2f} (target <= {P99_RATIO_TARGET:g}: {_verdict(0 < ratio <= P99_RATIO_TARGET)})",
        *(
            [
                "    p99 by the phase the events were committed in: "
                + ", ".join(f"{k} {v:,.1f} ms" for k, v in figures.live.p99_by_phase_ms.items())
            ]
            if figures.live.p99_by_phase_ms
            else []
        ),
        *_takeover_lines(figures),
        "  ETA at halfway: "
        + ("not estimated" if eta is None else f"{eta:.1f} % of the rebuild's time off"),
        f"  attempts {figures.attempts}; rebuild steps every {figures.step_interval_s:g} s",
        f"  check: the rebuilt generation equals the accepted state"
        f" ({figures.rows_checked:,} rows compared: "
        + ", ".join(f"{k} {v:,}" for k, v in figures.rows_checked_by.items())
        + ")",
    ]
    return "\n".join(lines)
