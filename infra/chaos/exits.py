"""The fleet's exits as the campaign records them: a death at an armed crash point is
one more kill in a narrow window; any other exit is a violation."""

from __future__ import annotations

from infra.chaos import check
from infra.chaos.fleet import Echo, Fleet
from infra.chaos.report import Report


def watch(fleet: Fleet, report: Report, seen: check.Seen, echo: Echo) -> None:
    fleet.probe()
    for exit_ in fleet.watch():
        if exit_.how.startswith("crash_point:"):
            point = exit_.how.removeprefix("crash_point:")
            report.window_crashes[point] += 1
            report.kills += 1
            report.faults[f"window:{point}"] += 1
        else:
            message = f"{exit_.process} exited with status {exit_.code}; see its log"
            echo(f"  VIOLATION: {message}")
            seen.exited_on_their_own.append(message)
