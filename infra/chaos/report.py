"""What the campaign reports: its counts of faults and kills, the judge's verdict, each
instance's work, the rebuild lane's figures, and the text or JSON they print as."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from infra.chaos import check, lane


@dataclass
class Report:
    seed: int
    scale: bool
    cluster: bool = False
    """Three Kafka nodes (``gapless chaos --cluster``)."""
    faults: Counter[str] = field(default_factory=Counter)
    kills: int = 0
    kills_undelivered: int = 0
    window_crashes: Counter[str] = field(default_factory=Counter)
    pg_restarts: int = 0
    broker_restarts: int = 0
    object_store_outages: int = 0
    registry_restarts: int = 0
    registry_outages: int = 0
    proxy_faults: int = 0
    verdict: check.Verdict = field(default_factory=check.Verdict)
    converged_s: float | None = None
    work: dict[str, dict[str, float]] = field(default_factory=dict)
    calm_work: dict[str, dict[str, float]] = field(default_factory=dict)
    calm_idle_without_work: list[str] = field(default_factory=list)
    calm_disarmed: list[str] = field(default_factory=list)
    start_s: dict[str, dict[str, float]] = field(default_factory=dict)
    gap_fills: dict[str, int] = field(default_factory=dict)
    gap_fills_duplicated: int = 0
    reported_streams: dict[str, int] = field(default_factory=dict)
    reported_by_several: int = 0
    duplicated_work: list[str] = field(default_factory=list)
    workload: dict[str, Any] = field(default_factory=dict)
    samples: int = 0
    rebuild_lane: lane.Figures = field(default_factory=lane.Figures)

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not self.duplicated_work

    def as_dict(self) -> dict[str, Any]:
        v = self.verdict
        return {
            "seed": self.seed,
            "scale": self.scale,
            "kafka_nodes": 3 if self.cluster else 1,
            "ok": self.ok,
            "kills": self.kills,
            "kills_undelivered": self.kills_undelivered,
            "window_crashes": dict(sorted(self.window_crashes.items())),
            "pg_restarts": self.pg_restarts,
            "broker_restarts": self.broker_restarts,
            "object_store_outages": self.object_store_outages,
            "registry_restarts": self.registry_restarts,
            "registry_outages": self.registry_outages,
            "proxy_faults": self.proxy_faults,
            "faults": dict(sorted(self.faults.items())),
            "events_committed": v.events_committed,
            "lost": v.lost,
            "doubled": v.doubled,
            "mismatched_rows": v.mismatched_rows,
            "progress_regressions": v.progress_regressions,
            "stuck_jobs": v.stuck_jobs,
            "unexpected_quarantine": v.unexpected_quarantine,
            "converged_s": self.converged_s,
            "progress_samples": self.samples,
            "work_by_instance": self.work,
            "calm_work_by_instance": self.calm_work,
            "calm_idle_without_work": self.calm_idle_without_work,
            "calm_disarmed": self.calm_disarmed,
            "start_s": self.start_s,
            "gap_fills_by_instance": self.gap_fills,
            "gap_fills_duplicated": self.gap_fills_duplicated,
            "reported_streams_by_instance": self.reported_streams,
            "streams_reported_by_several": self.reported_by_several,
            "duplicated_work": self.duplicated_work,
            "workload": self.workload,
            "rebuild_kills_by_point": self.rebuild_lane.by_point,
            "rebuild_kills_by_rebuild": self.rebuild_lane.by_rebuild,
            "rebuild_points_unreached": self.rebuild_lane.unreached,
            "rebuild_workers_killed_most": self.rebuild_lane.most_workers,
            "violations": v.violations,
        }

    def figure_line(self) -> str:
        v = self.verdict
        by_kind = ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items()))
        converged = f"{self.converged_s:.1f} s" if self.converged_s is not None else "never"
        nodes = " (3 Kafka nodes)" if self.cluster else ""
        return (
            f"chaos seed {self.seed}{nodes}: {self.kills} kills"
            f" ({sum(self.window_crashes.values())} in narrow windows), faults {by_kind};"
            f" {v.events_committed} events:"
            f" lost {v.lost}, doubled {v.doubled}, mismatched rows {v.mismatched_rows},"
            f" progress regressions {v.progress_regressions}, stuck jobs {v.stuck_jobs};"
            f" rebuild points {len(self.rebuild_lane.by_point)} of"
            f" {len(self.rebuild_lane.by_point) + len(self.rebuild_lane.unreached)} killed in"
            f" (at most {self.rebuild_lane.most_workers} workers in one rebuild);"
            f" converged in {converged}"
        )


def render(report: Report, as_json: bool) -> str:
    if as_json:
        return json.dumps(report.as_dict())
    lines = [report.figure_line()]
    if report.scale:
        for name, figures in sorted(report.work.items()):
            calm = report.calm_work.get(name, {})
            lines.append(
                f"  {name}: "
                + ", ".join(
                    f"{k} {v:.0f} ({calm.get(k, 0.0):.0f} in the calm)" for k, v in figures.items()
                )
            )
        lines.append(
            f"  gap fills by agents worker {report.gap_fills},"
            f" duplicated {report.gap_fills_duplicated};"
            f" streams reported by several workers {report.reported_by_several}"
        )
    if report.start_s:
        lines.append(
            "  restarts to healthy: "
            + ", ".join(
                f"{kind} median {t['median']:.1f}s (max {t['max']:.1f}s, {t['restarts']:.0f})"
                for kind, t in report.start_s.items()
            )
        )
    for point, kill in report.rebuild_lane.by_point.items():
        lines.append(
            f"  {point}: {kill['process']} died there at {kill['at_s']:.1f}s"
            f" (rebuild {kill['rebuild']})"
        )
    lines += [f"VIOLATION {v}" for v in report.verdict.violations]
    lines += [f"VIOLATION {d}" for d in report.duplicated_work]
    verdict = "OK" if report.ok else f"FAILED (reproduce with --seed {report.seed})"
    lines.append(f"chaos: {verdict}")
    return "\n".join(lines)
