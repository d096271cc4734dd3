"""Step 4 of the campaign: the plan delivered (``infra.chaos.schedule``). Its kills
in one lane, each once it is due and its target is up; its service faults (database
and broker restarts, object store outages, proxy faults) in another, a thread of its
own; the shadow rebuild asked for at ``REBUILD_AT`` of the time and the fence
started at ``FENCE_AT``. Then, until the rebuild and the fence are finished, the
rebuild lane's kills go on (``settle_lane``)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from infra.chaos import check, faults, lane, schedule
from infra.chaos.convergence import CONVERGE_TIMEOUT_S, ECHO_EVERY_S, rebuild_phase
from infra.chaos.crashpoints import REBUILD_POINTS, Ledger
from infra.chaos.exits import watch
from infra.chaos.fencing import Fence
from infra.chaos.fleet import Echo, Fleet
from infra.chaos.load import Load
from infra.chaos.report import Report
from infra.chaos.schedule import Planned
from infra.chaos.services import Private
from infra.chaos.work import WORK_METRICS

REBUILD_AT = 0.35
FENCE_AT = 0.55
SCRAPE_EVERY_S = 2.0
KILL_DEADLINE_FACTOR = 2.0
"""Kills wait for their target to be up; those not done within this many times the
campaign's seconds are left out (``kills_undelivered``). Past twice, what is still
pending is the agents workers' (the slowest to start again: a Faust worker and a
group rebalance) and the campaign only waits on them."""


def run_plan(
    plan: list[Planned],
    seconds: float,
    fleet: Fleet,
    services: Private,
    rebuild: Any,
    fence: Fence,
    load: Load,
    report: Report,
    seen: check.Seen,
    echo: Echo,
) -> None:
    """The plan for ``seconds``, and on until every kill is delivered (or left out)
    and the service lane is done; the fleet watched all along."""
    kills = [p for p in plan if p.kind == schedule.KILL]
    others = [p for p in plan if p.kind != schedule.KILL]
    began = time.monotonic()
    lane_errors: list[str] = []
    service_lane = threading.Thread(
        target=_service_lane,
        args=(others, began, fleet, services, report, lane_errors, echo),
        name="service faults",
        daemon=True,
    )
    service_lane.start()
    asked_rebuild = asked_fence = False
    asking: threading.Thread | None = None
    last_scrape = last_echo = 0.0
    pending = list(kills)
    while pending or service_lane.is_alive() or time.monotonic() - began < seconds:
        now = time.monotonic()
        elapsed = now - began
        if pending and elapsed > KILL_DEADLINE_FACTOR * seconds:
            _leave_out(pending, elapsed, report, echo)
        _kill_due(pending, elapsed, fleet, report)
        if not asked_rebuild and elapsed >= REBUILD_AT * seconds:
            asked_rebuild = True
            asking = threading.Thread(
                target=_ask_rebuild, args=(rebuild, echo), name="rebuild request", daemon=True
            )
            asking.start()
        if not asked_fence and elapsed >= FENCE_AT * seconds:
            asked_fence = True
            fence.start()
        watch(fleet, report, seen, echo)
        if now - last_scrape >= SCRAPE_EVERY_S:
            last_scrape = now
            fleet.scrape(tuple(WORK_METRICS.values()))
        if now - last_echo >= ECHO_EVERY_S:
            last_echo = now
            echo(
                f"  {elapsed:6.1f}s kills {report.kills} (+{sum(report.window_crashes.values())}"
                f" in windows), service faults {_service_faults(report)},"
                f" events written {load.events_written}, api decisions {load.api.decisions}"
            )
        time.sleep(0.05)
    if not asked_rebuild:
        _ask_rebuild(rebuild, echo)
    elif asking is not None:
        asking.join()
    if not asked_fence:
        fence.start()
    seen.workload_errors += lane_errors


def _service_lane(
    planned_faults: list[Planned],
    began: float,
    fleet: Fleet,
    services: Private,
    report: Report,
    lane_errors: list[str],
    echo: Echo,
) -> None:
    """Each service fault at its time: applied, held, healed, and counted; one that
    failed is in ``lane_errors`` instead."""
    for planned in planned_faults:
        _sleep_until(began + planned.at)
        fault = faults.build(planned, fleet, services, echo)
        at = time.monotonic() - began
        echo(f"  {at:6.1f}s {planned.kind} {planned.target} ({planned.hold:.1f}s)")
        try:
            fault.apply()
            if not isinstance(fault, faults.PostgresRestart):  # it holds in apply
                time.sleep(planned.hold)
            fault.heal()
        except Exception as exc:
            lane_errors.append(f"{planned.kind}: {type(exc).__name__}: {exc}")
            continue
        report.faults[planned.kind] += 1
        if planned.kind in (schedule.PG_FAST, schedule.PG_IMMEDIATE):
            report.pg_restarts += 1
        elif planned.kind in (schedule.BROKER_KILL, schedule.LEADER_KILL):
            report.broker_restarts += 1
        elif planned.kind == schedule.S3_DOWN:
            report.object_store_outages += 1
        elif planned.kind == schedule.REGISTRY_RESTART:
            report.registry_restarts += 1
        elif planned.kind == schedule.REGISTRY_DOWN:
            report.registry_outages += 1
        else:
            report.proxy_faults += 1


def _leave_out(pending: list[Planned], elapsed: float, report: Report, echo: Echo) -> None:
    """The machine restarts processes slower than the plan kills them: the kills still
    pending are left out, and said so (``kills_undelivered``)."""
    waiting = Counter(p.target for p in pending)
    echo(
        f"  {len(pending)} kills not delivered within {elapsed:.0f}s:"
        + ", ".join(f" {target} {n}" for target, n in sorted(waiting.items()))
    )
    report.kills_undelivered = len(pending)
    pending.clear()


def _kill_due(pending: list[Planned], elapsed: float, fleet: Fleet, report: Report) -> None:
    """Deliver the pending kills that are due: a due kill waits until its target is
    up (``Fleet.killable``); the others due meanwhile go first."""
    readiness: dict[str, bool] = {}
    for planned in [p for p in pending if p.at <= elapsed]:
        if planned.target not in readiness:
            readiness[planned.target] = fleet.killable(planned.target)
        if not readiness[planned.target]:
            continue
        readiness[planned.target] = False  # restarted now: not up yet
        pending.remove(planned)
        kill = faults.Kill(fleet, planned.target, planned.armed)
        kill.apply()
        if kill.happened:
            report.kills += 1
            report.faults[schedule.KILL] += 1


def settle_lane(
    book: Ledger,
    fleet: Fleet,
    rebuild: Any,
    fence: Fence,
    report: Report,
    seen: check.Seen,
    echo: Echo,
) -> None:
    """The lane's kills go on past the plan until the rebuild and the fence are
    finished (every point reached ends it sooner), the dead workers restarted; then
    the points nobody reached are closed (``infra.chaos.lane``)."""
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    last = 0.0
    while time.monotonic() < deadline:
        watch(fleet, report, seen, echo)
        reached = [p for p, r in book.entries().items() if not r.closed]
        phase = rebuild_phase(rebuild)
        if len(reached) >= len(REBUILD_POINTS) or (
            phase in ("done", "failed", "cancelled") and fence.done
        ):
            break
        if seen.exited_on_their_own:
            break  # a process is down for good: convergence fails anyway
        if time.monotonic() - last >= ECHO_EVERY_S:
            last = time.monotonic()
            echo(
                f"  rebuild lane: {len(reached)} of {len(REBUILD_POINTS)} points killed in;"
                f" rebuild {phase}, fence {'done' if fence.done else 'not done'}"
            )
        time.sleep(0.5)
    closed = lane.close(book)
    if closed:
        echo(f"  rebuild lane closed; never reached: {', '.join(closed)}")


def _service_faults(report: Report) -> int:
    return (
        report.pg_restarts
        + report.broker_restarts
        + report.object_store_outages
        + report.registry_restarts
        + report.registry_outages
        + (report.proxy_faults)
    )


def _sleep_until(instant: float) -> None:
    pause = instant - time.monotonic()
    if pause > 0:
        time.sleep(pause)


def _ask_rebuild(rebuild: Any, echo: Echo) -> None:
    """Publish the request (the broker may be down right now: again until it is sent)."""
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            rebuild.request()
            return
        except Exception as exc:
            echo(f"  rebuild request not sent yet ({type(exc).__name__}); again")
            rebuild.requested = False
            time.sleep(1.0)
