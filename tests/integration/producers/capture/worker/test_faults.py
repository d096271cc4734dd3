"""Faults between the steps of a run: what they leave, and that a replay converges.

Each test runs a twin tenant cleanly and compares (``converged``): the faulty run,
once replayed, must reach the same state as one successful run. The faults hit one
product's transaction, so the workers here settle one product per transaction (a
batch whose product fails is settled that way too: ``test_batches``), except where a
test says otherwise.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from db.repositories import capture_checkpoints, capture_items
from producers.capture.exceptions import CaptureRepairError
from producers.capture.worker import repair
from producers.capture.worker.consumer import due_job_ids
from producers.capture.worker.pipeline import CaptureWorker
from producers.capture.worker.resolution import RESOLVE, ItemWork, Plan
from producers.capture.worker.retries import RetryPolicy

from .conftest import Harness, Job, product

BATCH = [product("a", color="red"), product("b"), product("c", size="42"), product("d")]


def twin(harness: Harness, products: list[dict[str, Any]] = BATCH) -> tuple[Job, Job]:
    """The same capture for two tenants: t2 runs cleanly, t1 takes the faults."""
    harness.settle_batch = 1
    for tenant in ("t1", "t2"):
        harness.bind(tenant)
        harness.activate(tenant)
    reference = harness.capture(products, tenant="t2")
    assert harness.worker().run(reference.job_id).result == "done"
    return harness.capture(products, tenant="t1"), reference


def converged(harness: Harness) -> None:
    """t1 (faults, then replays) ends where t2 (one clean run) did."""
    assert harness.comparable("t1") == harness.comparable("t2")


def fail_for(source_item_id: str, target: Callable[..., Any], exc: Exception) -> Callable[..., Any]:
    """``target`` that raises ``exc`` when called about ``source_item_id``."""

    def wrapper(tx: Any, *args: Any, **kwargs: Any) -> Any:
        about = [
            a for a in args if isinstance(a, capture_items.NewResult | capture_items.ResultKey)
        ]
        key = about[0].key if isinstance(about[0], capture_items.NewResult) else about[0]
        if key.source_item_id == source_item_id:
            raise exc
        return target(tx, *args, **kwargs)

    return wrapper


def test_a_failed_checkpoint_move_rolls_the_products_writes_back(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    job, _ = twin(harness)
    real = capture_checkpoints.compare_and_set

    def fail_at_two(tx: Any, tenant: str, job_id: Any, pv: int, expected: int, to: int) -> bool:
        if to == 2:
            raise psycopg.OperationalError("the checkpoint write was lost")
        return real(tx, tenant, job_id, pv, expected, to)

    monkeypatch.setattr(capture_checkpoints, "compare_and_set", fail_at_two)
    events_before = len(harness.snapshot("t1")["outbox"])
    report = harness.worker().run(job.job_id)
    assert report.result == "aborted"
    assert harness.checkpoint(job) == 1
    results = harness.results(job)
    assert set(results) == {"a"}  # b's outcome went with the checkpoint move
    state = harness.snapshot("t1")
    assert [i[0] for i in state["items"]] == [harness.item("a")]  # and so did its item,
    assert len(state["decisions"]) == 2  # its decision (the other one approved the rule)
    # and its events: only a's decision, item and mapping events were added.
    assert [p for _, p, _ in state["outbox"]] == list(range(1, events_before + 4))

    monkeypatch.setattr(capture_checkpoints, "compare_and_set", real)
    harness.expire_claims()
    assert harness.worker().run(job.job_id).result == "done"
    converged(harness)


def test_a_product_whose_outcome_cannot_be_written_holds_the_checkpoint(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    job, _ = twin(harness)
    broken = fail_for("c", capture_items.lock, psycopg.OperationalError("disk full"))
    monkeypatch.setattr(capture_items, "lock", broken)
    report = harness.worker().run(job.job_id)
    assert report.result == "aborted"
    assert harness.checkpoint(job) == 2
    assert set(harness.results(job)) == {"a", "b"}
    assert harness.job(job)["status"] == "running"  # its claim will expire

    monkeypatch.undo()
    assert harness.worker().run(job.job_id).result == "not_claimed"  # the claim holds
    harness.expire_claims()
    assert harness.worker().run(job.job_id).result == "done"
    converged(harness)


def test_a_poison_product_exhausts_its_budget_while_the_others_settle(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    job, _ = twin(harness)

    def poisoned(uow: Any, work: ItemWork) -> Plan:
        if work.product.source_item_id == "b":
            raise KeyError("price: token=s3cr3t")
        return RESOLVE(uow, work)

    # Three attempts, at least 15 s apart unless the test makes them due.
    worker = harness.worker(resolve=poisoned, item_retries=RetryPolicy(3, 30.0, 60.0))
    first = worker.run(job.job_id)
    assert first.result == "retrying"
    assert first.checkpoint == 4  # past b: it has a durable retry record
    assert {k: v[:3] for k, v in harness.results(job).items()} == {
        "a": ("applied", 0, None),
        "b": ("retryable", 1, "INTERNAL_ERROR"),
        "c": ("applied", 0, None),
        "d": ("applied", 0, None),
    }
    assert worker.run(job.job_id).result == "not_claimed"  # the retry is not due yet
    harness.make_due()
    assert worker.run(job.job_id).result == "retrying"
    harness.make_due()
    third = worker.run(job.job_id)
    assert (third.result, third.error_code) == ("failed", "ITEMS_FAILED")
    assert harness.results(job)["b"][:3] == ("failed", 3, "INTERNAL_ERROR")

    with harness.conn() as conn:
        failures = list(repair.open_failures(conn, "t1"))
    # The job (finished with failures) and the product that failed.
    assert [(f.kind, f.error_code) for f in failures] == [
        ("job", "ITEMS_FAILED"),
        ("item", "INTERNAL_ERROR"),
    ]
    visible = failures[1]
    assert (visible.kind, visible.source_item_id, visible.status, visible.error_code) == (
        "item",
        "b",
        "failed",
        "INTERNAL_ERROR",
    )
    assert visible.error is not None and "s3cr3t" not in visible.error
    assert "KeyError" in visible.error
    job_view = harness.job(job)
    assert (job_view["status"], job_view["error_code"]) == ("failed", "ITEMS_FAILED")

    # The operator fixes the cause and retries: the product settles, the job is done.
    with harness.conn() as conn:
        repair.retry_item(conn, int(visible.handle), "operator", "fixed the price parser")
    assert harness.worker().run(job.job_id).result == "done"
    assert harness.results(job)["b"][0] == "applied"
    converged(harness)


def test_an_operator_skip_is_terminal_audited_and_finishes_the_job(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.bind()
    harness.activate()
    job = harness.capture([product("a"), product("b")])

    def poisoned(uow: Any, work: ItemWork) -> Plan:
        if work.product.source_item_id == "a":
            raise RuntimeError("cannot resolve")
        return RESOLVE(uow, work)

    worker = harness.worker(resolve=poisoned, item_retries=RetryPolicy(1, 0.01, 0.05))
    assert worker.run(job.job_id).result == "failed"
    with harness.conn() as conn:
        [_job, failure] = list(repair.open_failures(conn, None))
        with pytest.raises(CaptureRepairError) as refused:
            repair.skip_item(conn, int(failure.handle), "operator", "  ")
        assert refused.value.code == "REASON_REQUIRED"
        assert (
            repair.skip_item(conn, int(failure.handle), "operator", "listing withdrawn") == "done"
        )
        assert list(repair.open_failures(conn, None)) == []
        audit = conn.execute("SELECT action, actor, reason FROM capture_repair").fetchall()
        with pytest.raises(CaptureRepairError):
            repair.retry_item(conn, int(failure.handle), "operator")
    assert audit == [("skip", "operator", "listing withdrawn")]
    assert harness.results(job)["a"][0] == "skipped"
    assert harness.job(job)["status"] == "done"


@pytest.mark.slow
@pytest.mark.parametrize("point", ["mid-product", "mid-batch", "before-finish"])
def test_a_worker_killed_mid_job_is_resumed_from_its_checkpoint(
    harness: Harness, point: str
) -> None:
    """SIGKILL a real worker process (after the capture's artifact was put and its
    job committed), then let another worker take the job over once the dead one's
    claim has expired: the state is that of one clean run."""
    job, _ = twin(harness)
    env = {**os.environ, "GAPLESS_JOBS_TOPIC": harness.settings.jobs_topic}
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.integration.producers.capture.worker.crash_child",
            str(job.job_id),
            point,
        ],
        capture_output=True,
        timeout=120,
        env=env,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
    view = harness.job(job)
    assert (view["status"], view["claim_owner"]) == ("running", "doomed-child")
    # One product per transaction: two committed; batched: the first batch (all four)
    # went with the kill; the last transaction of either is committed before-finish.
    expected = {"mid-product": 2, "mid-batch": 0, "before-finish": len(BATCH)}[point]
    assert harness.checkpoint(job) == expected
    assert len(harness.results(job)) == expected

    def due() -> list[Any]:
        return due_job_ids(harness.pool, CaptureWorker.KINDS, 3600, 100, 10)

    assert job.job_id not in due()  # the dead worker's claim still holds
    harness.expire_claims()
    assert due() == [job.job_id]  # the repair scan finds the abandoned run
    report = harness.worker().run(job.job_id)
    assert report.result == "done"
    assert (
        report.outcomes
        == {
            "mid-product": {"applied": 2},
            "mid-batch": {"applied": 4},
            "before-finish": {},
        }[point]
    )
    converged(harness)


def test_skipping_a_failed_job_skips_its_open_products_too(harness: Harness) -> None:
    harness.bind()
    harness.activate()
    job = harness.capture([product("a"), product("b")])

    def poisoned(uow: Any, work: ItemWork) -> Plan:
        raise RuntimeError("cannot resolve")

    worker = harness.worker(resolve=poisoned, item_retries=RetryPolicy(1, 0.01, 0.05))
    assert worker.run(job.job_id).result == "failed"
    with harness.conn() as conn:
        with pytest.raises(CaptureRepairError):
            repair.skip_job(conn, job.job_id, "operator", "")
        repair.skip_job(conn, job.job_id, "operator", "the shop closed")
        assert list(repair.open_failures(conn, None)) == []
        with pytest.raises(CaptureRepairError) as again:
            repair.skip_job(conn, job.job_id, "operator", "twice")
    assert again.value.code == "NOT_FAILED"
    assert {k: v[0] for k, v in harness.results(job).items()} == {"a": "skipped", "b": "skipped"}
    assert harness.job(job)["status"] == "skipped"
