"""The campaign's rebuild crash points on real services, with worker processes that die
there as the campaign's agents workers do (``infra.chaos.crashpoints``, armed from
the environment: ``os._exit`` at the point, no clean-up).

Each cutover point: a worker process carries the rebuild into its cutover and dies
at the point (the live consumer's rows locked; the swap statement run, not
committed; committed, lease not released; lease released, not marked done). The
live applier goes on at once (the pause was the dead session's locks), and another
worker takes the rebuild over within seconds and finishes it: the new generation
serves, the live consumer's row counts every committed position once, the lease is
released, the accepted state is what the catalog serves.

The lane: two worker processes armed with every rebuild point once, through one
ledger, started again each time one dies, as the campaign runs its agents workers:
every point kills exactly once, in order, both workers die, and the rebuild
finishes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from db.tables.rebuilds import FINAL_PHASES
from infra.chaos.crashpoints import (
    CRASH_EXIT,
    CUTOVER_POINTS,
    LEDGER_VARIABLE,
    ONCE_VARIABLE,
    REBUILD_POINTS,
    Ledger,
)
from tests.integration.processors.rebuild.two_workers import LIVE, STREAM, TwoWorkers

ROOT = Path(__file__).resolve().parents[4]
DIES_WITHIN_S = 90.0
TAKEOVER_WITHIN_S = 10.0


def _worker(
    two: TwoWorkers, rebuild_id: uuid.UUID, name: str, ledger: Ledger, points: str
) -> subprocess.Popen[bytes]:
    """A worker process (``tests.fixtures.armed_rebuild_worker``) armed with ``points``."""
    env = {**os.environ, ONCE_VARIABLE: points, LEDGER_VARIABLE: str(ledger.directory)}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fixtures.armed_rebuild_worker",
            two.api.url,
            two.api.token,
            str(rebuild_id),
            name,
            "0",
        ],
        cwd=ROOT,
        env=env,
    )


def _wait(child: subprocess.Popen[bytes]) -> int:
    try:
        return child.wait(timeout=DIES_WITHIN_S)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)


def _live_row_free(two: TwoWorkers) -> bool:
    """Whether the live consumer's row of the stream can be locked at once (no
    cutover holds it: the live applier is not paused)."""
    with psycopg.connect(two.settings.product_dsn) as conn:
        conn.execute("SET lock_timeout = '3s'")
        try:
            conn.execute(
                "SELECT 1 FROM stream_progress WHERE consumer = %s AND tenant_id = %s"
                " AND catalog_id = %s AND history_epoch = %s FOR UPDATE",
                (LIVE, *STREAM),
            )
        except psycopg.errors.LockNotAvailable:
            return False
    return True


def _counted(two: TwoWorkers) -> tuple[int, int]:
    """The live row's (position, positions counted by an outcome)."""
    with psycopg.connect(two.settings.product_dsn) as conn:
        row = conn.execute(
            "SELECT position, applied_count + ignored_count + loaded_count FROM stream_progress"
            " WHERE consumer = %s AND tenant_id = %s AND catalog_id = %s AND history_epoch = %s",
            (LIVE, *STREAM),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _leases(two: TwoWorkers, rebuild_id: uuid.UUID) -> dict[uuid.UUID, bool]:
    """The rebuild's leases at the resolver: whether each is released."""
    with psycopg.connect(two.settings.resolver_dsn) as conn:
        rows = conn.execute(
            "SELECT lease_id, released_at IS NOT NULL FROM rebuild_lease WHERE holder = %s",
            (f"rebuild:{rebuild_id}",),
        ).fetchall()
    return {r[0]: bool(r[1]) for r in rows}


def _finished_and_served(two: TwoWorkers, rebuild_id: uuid.UUID) -> None:
    row = two.row(rebuild_id)
    assert (row.phase, row.attempt, row.error_code) == ("done", 1, None)
    assert row.previous_generation == 1
    assert two.live_generation() == row.generation == 2
    assert two.feed_live() == two.committed()
    position, counted = _counted(two)
    assert position == counted == two.committed()  # every position counted once
    assert row.lease_id is not None and _leases(two, rebuild_id)[row.lease_id]
    two.accepted_equals(2)


def _taken_over(two: TwoWorkers, rebuild_id: uuid.UUID) -> None:
    """Worker B takes the rebuild over within seconds and finishes it."""
    started = time.monotonic()
    while (row := two.b.advance(rebuild_id)) is None:
        assert time.monotonic() - started < TAKEOVER_WITHIN_S, "no takeover"
        time.sleep(0.1)
    assert two.row(rebuild_id).claimed_by == "worker-b"
    if row.phase != "done":
        assert two.until(two.b, rebuild_id, "done").phase == "done"


@pytest.mark.parametrize("point", CUTOVER_POINTS)
def test_a_worker_killed_at_a_cutover_step_is_taken_over_and_the_rebuild_finishes(
    two: TwoWorkers, point: str, tmp_path: Path
) -> None:
    two.feed_live()
    rebuild_id = two.request()
    assert two.until(two.a, rebuild_id, "cutting_over").phase == "cutting_over"
    two.a.close()  # A hands over (its lock goes with its session)
    two.write(60)
    live_before = two.feed_live()  # the live consumer ahead of H: the cutover catches up
    ledger = Ledger(tmp_path)
    child = _worker(two, rebuild_id, "worker-killed", ledger, point)
    assert _wait(child) == CRASH_EXIT, f"the worker did not die at {point}"
    reached = ledger.entries()[point]
    assert reached.pid == child.pid and str(rebuild_id) in reached.subject

    # What the dead worker left: its claim, and the cutover as far as it committed.
    row = two.row(rebuild_id)
    assert (row.phase, row.claimed_by) == ("cutting_over", "worker-killed")
    swapped = point in ("rebuild.cutover", "rebuild.released")
    assert (row.previous_generation is not None) is swapped
    assert two.live_generation() == (2 if swapped else 1)
    assert list(_leases(two, rebuild_id).values()) == [point == "rebuild.released"]
    # The pause ended with the dead worker's session: the live applier goes on now.
    assert _live_row_free(two)
    two.write(40)
    assert two.feed_live() == two.committed() > live_before

    _taken_over(two, rebuild_id)
    _finished_and_served(two, rebuild_id)
    assert len(_leases(two, rebuild_id)) == 1


def test_two_worker_processes_armed_with_every_rebuild_point_die_at_each_once(
    two: TwoWorkers, tmp_path: Path
) -> None:
    two.feed_live()
    rebuild_id = two.request()
    ledger = Ledger(tmp_path)
    points = ",".join(REBUILD_POINTS)
    incarnations = {"one": 0, "two": 0}
    names: dict[int, str] = {}

    def start(slot: str) -> subprocess.Popen[bytes]:
        incarnations[slot] += 1
        child = _worker(two, rebuild_id, f"worker-{slot}-{incarnations[slot]}", ledger, points)
        names[child.pid] = slot
        return child

    children = {slot: start(slot) for slot in incarnations}
    wrote = False
    deadline = time.monotonic() + 180
    try:
        # Until the rebuild is finished (the worker that finishes it exits; the other
        # one, never holding it again, would step on forever).
        while (phase := two.row(rebuild_id).phase) not in FINAL_PHASES:
            assert time.monotonic() < deadline, (phase, ledger.entries())
            for slot, child in list(children.items()):
                code = child.poll()
                if code == CRASH_EXIT:
                    children[slot] = start(slot)  # the restart policy of the campaign
                else:
                    assert code in (None, 0), f"worker {slot} exited {code}"
            if not wrote and phase == "catching_up":
                two.write(60)  # something to catch up with, and for the cutover
                wrote = True
            time.sleep(0.1)
    finally:
        for child in children.values():
            if child.poll() is None:
                child.kill()
                child.wait(timeout=10)
    entries = ledger.entries()
    assert sorted(entries) == sorted(REBUILD_POINTS), entries
    # In the order a rebuild passes them, each by a worker that died there.
    assert sorted(REBUILD_POINTS, key=lambda p: entries[p].at) == list(REBUILD_POINTS)
    assert all(e.pid in names and str(rebuild_id) in e.subject for e in entries.values())
    assert {names[e.pid] for e in entries.values()} == {"one", "two"}
    assert sum(incarnations.values()) == len(REBUILD_POINTS) + 2
    _finished_and_served(two, rebuild_id)
    # The lease taken by the worker that died before recording it is left to expire.
    assert sorted(_leases(two, rebuild_id).values()) == [False, True]
