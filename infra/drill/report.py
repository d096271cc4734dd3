"""What the drill reports: its timings and checks (``DrillReport``), the verdict they
make, and the text they print as."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class DrillReport:
    drill_ok: bool = False
    drill_pause_s: float = 0.0
    drill_restore_s: float = 0.0
    drill_fence_s: float = 0.0
    drill_rebuild_s: float = 0.0
    drill_resume_s: float = 0.0
    drill_recovery_s: float = 0.0
    backup_position: int = 0
    position_before_restore: int = 0
    events_lost_to_restore: int = 0
    old_epoch_in_kafka: int = 0
    old_epoch_deliveries: int = 0
    old_epoch_applied: int = 0
    old_epoch_unjudged: int = 0
    new_epoch: int = 0
    new_epoch_first_position: int | None = None
    new_epoch_positions: int = 0
    drill_events: int = 0
    drill_agents_workers: int = 0
    drill_reporting_resumed: bool = False
    drill_pruned_after_fence: bool = False
    new_epoch_reported: int = 0
    new_epoch_pruned: int = 0
    writes_refused_while_paused: str | None = None
    reads_refused_while_paused: str | None = None
    paused_by: list[str] = field(default_factory=list)
    rows_compared: int = 0
    mismatched_rows: int = 0
    mismatches: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for k, v in out.items():
            if isinstance(v, float):
                out[k] = round(v, 3)
        return out


def judge(report: DrillReport) -> None:
    """Step 8's checks: each one that failed is named in ``failures``; the drill is
    ``drill_ok`` when nothing failed."""
    checks = {
        "old_epoch_applied": report.old_epoch_applied == 0,
        "old_epoch_delivered": report.old_epoch_deliveries > 0 and not report.old_epoch_unjudged,
        "rows_match": report.rows_compared > 0 and report.mismatched_rows == 0,
        "new_epoch_from_1": report.new_epoch_first_position == 1,
        "writes_refused": report.writes_refused_while_paused == "STREAM_PAUSED",
        "reads_refused": report.reads_refused_while_paused == "STREAM_BEING_RESTORED",
        "lost_to_restore": report.events_lost_to_restore > 0,
        "reporting_resumed": report.drill_reporting_resumed,
        "pruned_after_fence": report.drill_pruned_after_fence,
    }
    report.failures += [name for name, ok in checks.items() if not ok]
    report.drill_ok = not report.failures


def render(report: DrillReport) -> str:
    rows = [
        ("pause (every process acknowledged)", f"{report.drill_pause_s:.2f} s"),
        ("restore in place (pg_restore)", f"{report.drill_restore_s:.2f} s"),
        ("fence (epoch issued, old streams fenced)", f"{report.drill_fence_s:.2f} s"),
        ("rebuild at the new epoch", f"{report.drill_rebuild_s:.2f} s"),
        ("resume (every process acknowledged)", f"{report.drill_resume_s:.2f} s"),
        ("recovery, pause to resume", f"{report.drill_recovery_s:.2f} s"),
        ("events lost to the restore (RPO)", str(report.events_lost_to_restore)),
        ("old-epoch deliveries after the fence", str(report.old_epoch_deliveries)),
        ("  of them applied", str(report.old_epoch_applied)),
        ("new epoch starts at position", str(report.new_epoch_first_position)),
        ("events written (both epochs)", str(report.drill_events)),
        ("agents workers", str(report.drill_agents_workers)),
        ("progress reported at the new epoch", str(report.new_epoch_reported)),
        ("new-epoch events pruned after the fence", str(report.new_epoch_pruned)),
        ("rows compared / mismatched", f"{report.rows_compared} / {report.mismatched_rows}"),
        ("paused and acknowledged by", ", ".join(report.paused_by)),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    verdict = "drill: OK" if report.drill_ok else f"drill: FAILED ({', '.join(report.failures)})"
    return "\n".join([*lines, verdict])
