"""The rebuild lane's summary: each point reached is attributed to the process that
died there and the rebuild it carried; points never reached are listed; the most
workers killed in one rebuild is what the judge requires to be two."""

from __future__ import annotations

import uuid

from infra.chaos.crashpoints import REBUILD_POINTS, Reached
from infra.chaos.lane import Rebuild, summarize

DOMAIN = str(uuid.uuid4())
FENCE = str(uuid.uuid4())
KNOWN = {
    DOMAIN: Rebuild("run-w1/catalog1/1", "done", 1, 7),
    FENCE: Rebuild("run-fence/catalog1/2", "done", 1, 2),
}
PIDS = {101: "agents-1", 102: "agents-2", 103: "agents-3", 104: "agents-1"}


def _entries(**by_point: tuple[int, str]) -> dict[str, Reached]:
    return {
        point: Reached(point, pid, subject, 1000.0 + n)
        for n, (point, (pid, subject)) in enumerate(by_point.items())
    }


def test_every_point_is_attributed_to_its_process_and_rebuild() -> None:
    pids = [101, 102, 103, 104]
    entries = {
        point: Reached(point, pids[n % 4], f"rebuild:{DOMAIN}" if n == 1 else DOMAIN, 1000.0 + n)
        for n, point in enumerate(REBUILD_POINTS)
    }
    figures = summarize(entries, PIDS, KNOWN, began=990.0)
    assert figures.unreached == []
    assert figures.by_point["rebuild.claimed"] == {
        "process": "agents-1",
        "rebuild": DOMAIN,
        "at_s": 10.0,
    }
    assert figures.by_point["rebuild.leased"]["rebuild"] == DOMAIN  # from the lease's holder
    domain = figures.by_rebuild[DOMAIN]
    assert domain["stream"] == "run-w1/catalog1/1" and domain["chunks_total"] == 7
    assert domain["points"] == list(REBUILD_POINTS)
    # pid 104 is agents-1 again (a later incarnation): three distinct workers.
    assert domain["processes"] == ["agents-1", "agents-2", "agents-3"]
    assert figures.most_workers == 3


def test_points_closed_or_never_written_are_unreached() -> None:
    entries = _entries(
        **{
            "rebuild.claimed": (101, DOMAIN),
            "rebuild.leased": (101, f"rebuild:{FENCE}"),
            "rebuild.cutover.swapped": (0, "closed"),
        }
    )
    figures = summarize(entries, PIDS, KNOWN, began=1000.0)
    assert "rebuild.cutover.swapped" in figures.unreached
    assert "rebuild.cutover" in figures.unreached
    assert len(figures.unreached) == len(REBUILD_POINTS) - 2
    # One worker in each rebuild: the judge's two-workers rule fails this run.
    assert figures.most_workers == 1
    assert figures.by_rebuild[FENCE]["points"] == ["rebuild.leased"]


def test_a_process_the_fleet_never_started_is_named_by_its_pid() -> None:
    figures = summarize(_entries(**{"rebuild.claimed": (555, DOMAIN)}), PIDS, KNOWN, 1000.0)
    assert figures.by_point["rebuild.claimed"]["process"] == "pid 555"
