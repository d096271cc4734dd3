"""Replay safety as a property: any schedule of faults, duplicate deliveries and
replays reaches the fixed point of one clean run.

Hypothesis draws a few captures of one source (products of a small sku pool, so
captures overlap, with distinct capture times, so newer and older work meet) and an
order to process them in. A reference tenant processes them cleanly in that order.
A second tenant gets the same captures and, for each, a drawn schedule: runs that
abort on a lost checkpoint move or an unwritable outcome, runs where a product
fails and is retried, duplicate deliveries at once, runs left under a claim that
then expires; then replays until the job is done. Both tenants must end in equal
states (items, revisions, mappings, outcomes, claims, checkpoints, events), and the
catalog must say what the newest capture of each sku said.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from unittest import mock

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from db.repositories import capture_checkpoints, capture_items
from producers.capture.worker.pipeline import CaptureWorker
from producers.capture.worker.resolution import RESOLVE, ItemWork, Plan
from producers.capture.worker.retries import RetryPolicy

from .conftest import T0, Harness, Job, product

SKUS = ("s1", "s2", "s3", "s4")
COLOURS = ("red", "blue", "green")
FAULTS = (
    "clean",
    "lost_checkpoint",
    "unwritable_outcome",
    "product_fails",
    "duplicates",
    "dies",
    "overlap",
)
_examples = itertools.count()


@st.composite
def captures(draw: st.DrawFn) -> list[list[dict[str, Any]]]:
    """1-3 captures, each 1-4 products with distinct skus."""
    count = draw(st.integers(1, 3))
    return [
        [
            product(sku, f"{sku} v{draw(st.integers(1, 3))}", color=draw(st.sampled_from(COLOURS)))
            for sku in draw(st.lists(st.sampled_from(SKUS), min_size=1, max_size=4, unique=True))
        ]
        for _ in range(count)
    ]


@contextmanager
def fault(kind: str, at: int) -> Iterator[Callable[[], None]]:
    """The fault ``kind`` injected at the ``at``-th product of the next run; yields
    what to do after that run (e.g. let a dead worker's claim expire)."""
    if kind == "lost_checkpoint":
        real = capture_checkpoints.compare_and_set

        def lose(tx: Any, tenant: str, job: Any, pv: int, expected: int, to: int) -> bool:
            if to == at + 1:
                raise psycopg.OperationalError("lost")
            return real(tx, tenant, job, pv, expected, to)

        with mock.patch.object(capture_checkpoints, "compare_and_set", lose):
            yield lambda: None
    elif kind == "unwritable_outcome":
        real_lock = capture_items.lock

        def refuse(tx: Any, new: capture_items.NewResult) -> Any:
            if new.item_index == at:
                raise psycopg.OperationalError("disk full")
            return real_lock(tx, new)

        with mock.patch.object(capture_items, "lock", refuse):
            yield lambda: None
    else:
        yield lambda: None


def failing_at(at: int) -> Callable[[Any, ItemWork], Plan]:
    def resolve(uow: Any, work: ItemWork) -> Plan:
        if work.product.locator.endswith(f"/{at}"):
            raise RuntimeError("transient")
        return RESOLVE(uow, work)

    return resolve


def overlapping(
    harness: Harness, other: CaptureWorker, job: Job, at: int
) -> Callable[[Any, ItemWork], Plan]:
    """A resolve that, at product ``at``, lets its claim expire and another worker
    run the same job meanwhile (which waits on this product's row lock)."""
    started: list[threading.Thread] = []

    def resolve(uow: Any, work: ItemWork) -> Plan:
        if work.product.locator.endswith(f"/{at}") and not started:
            harness.expire_claims()
            started.append(threading.Thread(target=other.run, args=(job.job_id,)))
            started[0].start()
            started[0].join(0.3)
        return RESOLVE(uow, work)

    resolve.started = started  # type: ignore[attr-defined]
    return resolve


def settle(harness: Harness, worker: CaptureWorker, job: Job) -> None:
    """Replay the job until it is done (due retries, expired claims)."""
    for _ in range(10):
        if harness.job(job)["status"] == "done":
            return
        harness.make_due()
        harness.expire_claims()
        worker.run(job.job_id)
    raise AssertionError(f"job {job.job_id} never finished: {harness.job(job)}")


@pytest.mark.slow
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    batch=captures(),
    data=st.data(),
)
def test_any_schedule_of_faults_and_replays_reaches_the_clean_runs_fixed_point(
    harness: Harness, batch: list[list[dict[str, Any]]], data: st.DataObject
) -> None:
    n = next(_examples)
    clean, faulty = f"clean{n}", f"faulty{n}"
    for tenant in (clean, faulty):
        harness.tenant(tenant)
    times = data.draw(st.permutations(range(len(batch))), label="capture times")
    order = data.draw(st.permutations(range(len(batch))), label="processing order")
    jobs = {
        tenant: [
            harness.capture(products, tenant=tenant, captured_at=T0 + timedelta(hours=times[i]))
            for i, products in enumerate(batch)
        ]
        for tenant in (clean, faulty)
    }
    plain = harness.worker(item_retries=RetryPolicy(100, 0.01, 0.01))
    for i in order:
        assert plain.run(jobs[clean][i].job_id).result == "done"

    for i in order:
        job = jobs[faulty][i]
        size = len(batch[i])
        schedule = data.draw(
            st.lists(st.tuples(st.sampled_from(FAULTS), st.integers(0, size - 1)), max_size=3),
            label=f"schedule of capture {i}",
        )
        for kind, at in schedule:
            if kind == "product_fails":
                harness.worker(
                    resolve=failing_at(at), item_retries=RetryPolicy(100, 0.01, 0.01)
                ).run(job.job_id)
            elif kind == "duplicates":
                threads = [threading.Thread(target=plain.run, args=(job.job_id,)) for _ in range(3)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            elif kind == "overlap":
                resolve = overlapping(harness, plain, job, at)
                harness.worker(resolve=resolve).run(job.job_id)
                for thread in resolve.started:  # type: ignore[attr-defined]
                    thread.join(30)
            elif kind == "dies":
                # A claim whose worker never came back: only the claim's expiry frees it.
                with harness.conn() as conn:
                    conn.execute(
                        "UPDATE intake_job SET status = 'running', claim_owner = 'dead',"
                        " claim_expires_at = clock_timestamp() + interval '1 hour'"
                        " WHERE job_id = %s AND status NOT IN ('done', 'failed')",
                        (job.job_id,),
                    )
                assert plain.run(job.job_id).result == "not_claimed"
            else:
                with fault(kind, at):
                    plain.run(job.job_id)
            harness.expire_claims()
        settle(harness, plain, job)

    assert harness.comparable(faulty) == harness.comparable(clean)
    # And the catalog says what the newest capture of each sku said.
    newest: dict[str, dict[str, Any]] = {}
    for i in sorted(range(len(batch)), key=lambda i: times[i]):
        for p in batch[i]:
            newest[p["sku"]] = p
    items = {i[3].split()[0]: (i[3], i[4]["colour"]) for i in harness.snapshot(faulty)["items"]}
    assert items == {sku: (p["title"], p["attributes"]["color"]) for sku, p in newest.items()}
