"""The rebuild phase's figures as one flat JSON object or a table for people."""

from __future__ import annotations

from dataclasses import dataclass, field

from infra.bench.machine import load_line

RTO_TARGET_S = 60.0
LOAD_RATIO_TARGET = 0.5
PAUSE_TARGET_MS = 100.0


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
    """Items the baseline copied, each as its item row and its search document."""
    bare_copy_s: float
    """Both tables' COPYs and COMMITs."""
    api: Memory
    agents: Memory
    step_interval_s: float
    rows_checked: int
    environment: dict[str, object] = field(default_factory=dict)
    bare_copy_items_s: float = 0.0
    """The item rows' COPYs alone (the baseline before the documents counted)."""

    def phase(self, name: str) -> float:
        return self.phases_s.get(name, 0.0)

    @property
    def load_eps(self) -> float:
        load = self.phase("loading")
        return self.rows_loaded / load if load > 0 else 0.0

    @property
    def bare_copy_eps(self) -> float:
        return self.bare_copy_rows / self.bare_copy_s if self.bare_copy_s > 0 else 0.0

    @property
    def load_ratio(self) -> float:
        return self.load_eps / self.bare_copy_eps if self.bare_copy_eps > 0 else 0.0

    @property
    def bare_copy_items_only_eps(self) -> float:
        s = self.bare_copy_items_s
        return self.bare_copy_rows / s if s > 0 else 0.0

    @property
    def load_ratio_items_only(self) -> float:
        eps = self.bare_copy_items_only_eps
        return self.load_eps / eps if eps > 0 else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "rebuild_items": self.items,
            "rebuild_export_s": round(self.phase("exporting"), 2),
            "rebuild_load_s": round(self.phase("loading"), 2),
            "rebuild_catchup_s": round(self.phase("catching_up"), 2),
            "rebuild_cutover_pause_ms": round(self.cutover_pause_ms, 1),
            "rebuild_rto_s": round(self.rto_s, 2),
            "rebuild_load_eps": round(self.load_eps, 1),
            "rebuild_bare_copy_eps": round(self.bare_copy_eps, 1),
            "rebuild_load_ratio": round(self.load_ratio, 3),
            "rebuild_peak_rss_mb": round(max(self.api.peak_mb, self.agents.peak_mb), 1),
            "rebuild_requested_s": round(self.phase("requested"), 2),
            "rebuild_leased_s": round(self.phase("leased"), 2),
            "rebuild_cutover_s": round(self.phase("cutting_over"), 2),
            "rebuild_export_write_s": round(self.export_write_s, 2),
            "rebuild_rows_loaded": self.rows_loaded,
            "rebuild_chunks": self.chunks,
            "rebuild_attempts": self.attempts,
            "rebuild_catchup_events": self.catchup_events,
            "rebuild_live_events": self.live_events,
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
            **self.environment,
        }


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def render_rebuild_table(figures: RebuildFigures) -> str:
    d = figures.as_dict()
    env = figures.environment
    load_ratio = float(str(d["rebuild_load_ratio"]))
    rto = float(str(d["rebuild_rto_s"]))
    pause = float(str(d["rebuild_cutover_pause_ms"]))
    lines = [
        f"gapless bench rebuild: {figures.items:,} items, {env.get('cores', '?')} cores,"
        f" PostgreSQL {env.get('postgres', '?')}"
        f" (synchronous_commit={env.get('synchronous_commit', '?')}),"
        f" {load_line(env)}",
        "",
        "  phase (as the rebuild row records it)      seconds",
        f"  requested (the request taken, a lease)    {figures.phase('requested'):>8.2f}",
        f"  leased (the export asked for)             {figures.phase('leased'):>8.2f}",
        f"  exporting                                 {figures.phase('exporting'):>8.2f}"
        f"   (the resolver wrote it in {figures.export_write_s:.2f} s)",
        f"  loading                                   {figures.phase('loading'):>8.2f}"
        f"   ({figures.rows_loaded:,} rows in {figures.chunks} chunks)",
        f"  catching up                               {figures.phase('catching_up'):>8.2f}"
        f"   ({figures.catchup_events:,} positions after W)",
        f"  cutting over                              {figures.phase('cutting_over'):>8.2f}",
        f"  whole rebuild, request to done (RTO)      {figures.rto_s:>8.2f}"
        f"   target <= {RTO_TARGET_S:.0f} s for 1,000,000 items"
        + (f": {_verdict(rto <= RTO_TARGET_S)}" if figures.items >= 1_000_000 else ""),
        "",
        f"  load {figures.load_eps:,.0f} items/s vs a bare COPY of the same rows (item and"
        f" search document) {figures.bare_copy_eps:,.0f} items/s: ratio {load_ratio:.2f}"
        f" (target >= {LOAD_RATIO_TARGET}: {_verdict(load_ratio >= LOAD_RATIO_TARGET)});"
        f" against the item rows alone {figures.bare_copy_items_only_eps:,.0f} rows/s:"
        f" {figures.load_ratio_items_only:.2f}",
        f"  the live applier paused {pause:.1f} ms at cutover (target <= {PAUSE_TARGET_MS:.0f} ms:"
        f" {_verdict(pause <= PAUSE_TARGET_MS)})",
        f"  resolver API RSS {figures.api.before_mb:.0f} MB before, peak"
        f" {figures.api.peak_mb:.0f} MB during export and load; agents"
        f" {figures.agents.before_mb:.0f} MB before, peak {figures.agents.peak_mb:.0f} MB",
        f"  live writer: {figures.live_events:,} events committed during the rebuild;"
        f" attempts {figures.attempts}; rebuild steps every {figures.step_interval_s:g} s",
        f"  check: the rebuilt generation equals the accepted state"
        f" ({figures.rows_checked:,} rows compared)",
    ]
    return "\n".join(lines)
