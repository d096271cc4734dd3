"""Two agents workers on one rebuild, on real services (issue 29, defect 2 and the
takeover under faults).

A step acts only from the phase it began in and stops as soon as its claim is lost:
worker A, stalled between fetching a catch-up page and applying it, must not take a
rebuild that worker B finished, or that an operator cancelled (and the cleanup
released), back to ``requested``. Before the fix both went back to ``requested`` (the
restart was taken from whatever phase was committed then), and in the second case
the shadow first recreated its progress row in generation 1, the serving one.

A worker that dies hands its rebuild over at once: its session ends and with it the
rebuild's lock, so the next worker takes the claim without waiting for its time
(60 s) to run out; before the fix no other worker could take a rebuild over until
then.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from processors.rebuild.cleanup import sweep
from processors.rebuild.orchestrator import Orchestrator
from processors.rebuild.requests import accept
from schemas.control import ControlCommand
from tests.integration.processors.rebuild.two_workers import CATALOG, LIVE, TENANT, TwoWorkers

ROOT = Path(__file__).resolve().parents[4]


def test_a_worker_stalled_mid_catch_up_leaves_a_rebuild_another_worker_finished_done(
    two: TwoWorkers,
) -> None:
    two.feed_live()
    rebuild_id = two.request()
    two.until(two.a, rebuild_id, "catching_up")
    two.write(200)  # events after W: A's catch-up has pages to fetch

    def b_finishes() -> None:
        two.expire_claim(rebuild_id)  # A stalled longer than its claim lasts
        assert two.until(two.b, rebuild_id, "done").phase == "done"

    two.a_client.meanwhile = b_finishes
    after = two.a.advance(rebuild_id)  # A applies its page, then stops
    row = two.row(rebuild_id)
    assert (row.phase, row.attempt, row.error_code) == ("done", 1, None)
    assert after is None  # it is worker B's
    assert two.live_generation() == row.generation == 2
    assert two.a.advance(rebuild_id) is None  # finished: nothing to claim
    assert two.feed_live() == two.committed()
    two.accepted_equals(2)


def test_a_worker_stalled_mid_catch_up_leaves_a_cancelled_and_cleaned_rebuild_cancelled(
    two: TwoWorkers,
) -> None:
    two.feed_live()
    rebuild_id = two.request()
    shadow = two.until(two.a, rebuild_id, "catching_up").shadow_consumer
    two.write(200)

    def cancel_and_clean() -> None:
        cancel = ControlCommand(
            command_id=uuid.uuid4(),
            kind="cancel",
            tenant_id=TENANT,
            catalog_id=CATALOG,
            rebuild_id=rebuild_id,
            requested_by="op",
            reason="changed my mind",
            requested_at=datetime.now(UTC),
        )
        answer = accept(two.settings.product_dsn, cancel, LIVE, lambda _t, _c: 1)
        assert answer.status == "cancelled"
        swept = sweep(two.settings.product_dsn, two.client, batch=100, max_batches=10_000)
        assert swept.rebuilds_cleaned == 1
        assert two.shadow_rows(shadow) == (0, 0)

    two.a_client.meanwhile = cancel_and_clean
    two.a.advance(rebuild_id)
    row = two.row(rebuild_id)
    assert (row.phase, row.attempt) == ("cancelled", 1)
    # The page was never applied: no row of the shadow, none in the serving generation.
    assert two.shadow_rows(shadow) == (0, 0)
    assert two.live_generation() == 1
    assert two.a.advance(rebuild_id) is None
    assert two.row(rebuild_id).phase == "cancelled"
    assert two.feed_live() == two.committed()
    two.accepted_equals(1)


def _end_session(two: TwoWorkers, worker: Orchestrator) -> int:
    """End the worker's claims session as its process dying would end it."""
    with psycopg.connect(two.settings.product_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %s",
            (f"rebuild-claims:{worker.worker}",),
        ).fetchone()
    return int(row[0]) if row else 0


def _claimant(two: TwoWorkers, rebuild_id: uuid.UUID) -> str | None:
    with psycopg.connect(two.settings.product_dsn) as conn:
        row = conn.execute(
            "SELECT claimed_by FROM rebuild WHERE rebuild_id = %s", (rebuild_id,)
        ).fetchone()
    return None if row is None else row[0]


def test_each_phase_continues_on_another_worker_at_once_when_its_worker_dies(
    two: TwoWorkers,
) -> None:
    """After every step, the worker that took it dies (its session ends, its claim
    still has a minute to run): the next worker takes the rebuild over at its first
    try, in every phase, and the rebuild finishes."""
    two.feed_live()
    rebuild_id = two.request()
    holder = two.worker("worker-0")
    row = holder.advance(rebuild_id)
    assert row is not None
    phases = [row.phase]
    wrote = False
    for n in range(1, 200):
        if row.phase == "done":
            break
        if row.phase == "catching_up" and not wrote:
            two.write(150)  # something to catch up with
            wrote = True
        _end_session(two, holder)
        nxt = two.worker(f"worker-{n}")
        started = time.monotonic()
        taken = nxt.advance(rebuild_id)
        assert taken is not None, f"{nxt.worker} could not take over in {row.phase}"
        assert time.monotonic() - started < 10
        assert _claimant(two, rebuild_id) == nxt.worker
        holder, row = nxt, taken
        if phases[-1] != row.phase:
            phases.append(row.phase)
    assert phases == ["leased", "exporting", "loading", "catching_up", "cutting_over", "done"]
    assert two.row(rebuild_id).attempt == 1
    assert two.feed_live() == two.committed()
    two.accepted_equals(2)


def test_a_worker_killed_mid_catch_up_is_taken_over_within_seconds(two: TwoWorkers) -> None:
    """kill -9 of the worker process in the middle of its catch-up: another worker
    carries the rebuild on within seconds, from where the dead one's committed pages
    left the shadow, and finishes it."""
    two.feed_live()
    rebuild_id = two.request()
    row = two.until(two.a, rebuild_id, "catching_up")
    w = row.export_position
    assert w is not None
    two.write(200)
    two.a.close()  # A hands over (its lock goes with its session)
    two.expire_claim(rebuild_id)
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fixtures.rebuild_worker",
            two.api.url,
            two.api.token,
            str(rebuild_id),
            "worker-killed",
            "0.3",  # seconds per catch-up page of 20 events: about 3 s in all
        ],
        cwd=ROOT,
        env=os.environ.copy(),
    )
    try:
        deadline = time.monotonic() + 60
        while (two.progress(row.shadow_consumer) or 0) <= w:
            assert child.poll() is None, "the worker process ended"
            assert time.monotonic() < deadline, "the worker process never caught up a page"
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
    assert _claimant(two, rebuild_id) == "worker-killed"
    assert two.row(rebuild_id).phase in ("catching_up", "cutting_over")
    started = time.monotonic()
    while two.b.advance(rebuild_id) is None:
        assert time.monotonic() - started < 10, "no takeover within 10 s"
        time.sleep(0.1)
    took = time.monotonic() - started
    assert took < 5, took
    assert _claimant(two, rebuild_id) == "worker-b"
    assert two.until(two.b, rebuild_id, "done").phase == "done"
    assert two.row(rebuild_id).attempt == 1
    assert two.feed_live() == two.committed()
    two.accepted_equals(2)
