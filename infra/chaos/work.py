"""Each instance's work as the campaign counts it from the processes' /metrics and
logs, and the work no two agents workers may both have done (gap fills, progress
reports)."""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path

from infra.chaos.fleet import Fleet
from infra.chaos.report import Report

WORK_METRICS = {
    "relay": "gapless_relay_published_total",
    "agents": "gapless_applier_events_total",
    "resolver-worker": "gapless_worker_items_total",
}
"""What counts as one instance's work: events published, events applied (by outcome,
summed), capture products settled."""
REPORTS_WAIT_S = 15.0
GAP_FILL = re.compile(
    r"stream \('([^']*)', '([^']*)', (\d+)\): filled from retained events after (\d+)"
)


def count_work(fleet: Fleet, report: Report, logs: Path, run_id: str) -> None:
    """Each instance's work, and the gap closer's and the progress reporter's work
    across agents workers: gap fills from each worker's log, the streams whose
    progress each worker reported from its /metrics (``gapless_reported_progress``)."""
    fleet.scrape(tuple(WORK_METRICS.values()))
    for kind, metric in WORK_METRICS.items():
        for n in fleet.names(kind):
            report.work[n] = {metric: fleet.work(n).get(metric, 0.0)}
    fills: dict[tuple[str, ...], set[str]] = {}
    for name in fleet.names("agents"):
        count = 0
        log = logs / f"{run_id}-{name}.log"
        for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
            found = GAP_FILL.search(line.replace('\\"', '"'))
            if found:
                count += 1
                fills.setdefault(found.groups(), set()).add(name)
        report.gap_fills[name] = count
    # Only the holder of the recovery lease reports; one restarted moments ago may
    # not have yet: give the workers a few report intervals (one second here) until
    # one of them shows reported streams, then read what each shows.
    urls: dict[str, str] = {}
    for name in fleet.names("agents"):
        member = fleet.members[name]
        if member.metrics_url and member.process.alive():
            urls[name] = member.metrics_url
    deadline = time.monotonic() + REPORTS_WAIT_S
    while True:
        reported = {n: _label_sets(u, "gapless_reported_progress") for n, u in urls.items()}
        if any(reported.values()) or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    report.reported_streams = {n: len(streams) for n, streams in reported.items()}
    report.gap_fills_duplicated = sum(1 for holders in fills.values() if len(holders) > 1)
    everyone = Counter(s for streams in reported.values() for s in streams)
    report.reported_by_several = sum(1 for n in everyone.values() if n > 1)
    if report.gap_fills_duplicated:
        report.duplicated_work.append(
            f"gap closer: {report.gap_fills_duplicated} gaps filled by more than one agents worker"
        )
    if report.reported_by_several:
        report.duplicated_work.append(
            f"progress reporter: {report.reported_by_several} streams reported by more than one"
            " agents worker"
        )


def _label_sets(url: str, metric: str) -> set[str]:
    import http.client
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            text = response.read().decode()
    except (OSError, http.client.HTTPException):  # down, or killed while answering
        return set()
    return {
        line.split("{", 1)[1].split("}", 1)[0]
        for line in text.splitlines()
        if line.startswith(metric + "{")
    }
