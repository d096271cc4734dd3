"""A run settles its products in batches, one transaction each, with exactly the
outcome of settling them one by one.

Which transaction wrote a result row is its ``xmin``: the rows a batch settled share
one. Each test runs a twin tenant one product per transaction and compares
(``converged``).
"""

from __future__ import annotations

from typing import Any

import pytest

from producers.capture.worker.resolution import RESOLVE, ItemWork, Plan
from producers.capture.worker.retries import RetryPolicy

from .conftest import Harness, Job, product
from .test_faults import converged


def _transactions(harness: Harness, job: Job) -> dict[str, int]:
    """source item id → the transaction that last wrote its result row."""
    with harness.conn() as conn:
        rows = conn.execute(
            "SELECT source_item_id, xmin::text::bigint FROM capture_item WHERE job_id = %s",
            (job.job_id,),
        ).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def _twin(harness: Harness, products: list[dict[str, Any]], batch: int) -> Job:
    """t2 settles ``products`` one by one; returns t1's job of the same capture, for a
    worker settling ``batch`` at a time."""
    for tenant in ("t1", "t2"):
        harness.bind(tenant)
        harness.activate(tenant)
    reference = harness.capture(products, tenant="t2")
    assert harness.worker(settle_batch=1).run(reference.job_id).result == "done"
    assert len(set(_transactions(harness, reference).values())) == len(products)
    harness.settle_batch = batch
    return harness.capture(products, tenant="t1")


def test_a_capture_is_settled_one_transaction_per_batch(harness: Harness) -> None:
    products = [product(f"p{n:03}", color="red" if n % 3 else "blue") for n in range(120)]
    job = _twin(harness, products, batch=50)
    report = harness.worker().run(job.job_id)
    assert (report.result, report.checkpoint, report.outcomes) == ("done", 120, {"applied": 120})
    by = _transactions(harness, job)
    batches = [{by[f"p{n:03}"] for n in range(a, b)} for a, b in ((0, 50), (50, 100), (100, 120))]
    assert [len(b) for b in batches] == [1, 1, 1]
    assert len(set.union(*batches)) == 3
    assert harness.checkpoint(job) == 120
    converged(harness)


def test_a_failing_product_sends_its_batch_one_by_one(harness: Harness) -> None:
    """The failed batch left nothing; then each of its products went alone, so the
    failure is recorded on its product and the others settle as they would alone."""
    products = [product(f"p{n}") for n in range(6)]
    job = _twin(harness, products, batch=50)

    def poisoned(uow: Any, work: ItemWork) -> Plan:
        if work.product.source_item_id == "p3":
            raise KeyError("price")
        return RESOLVE(uow, work)

    worker = harness.worker(resolve=poisoned, item_retries=RetryPolicy(3, 30.0, 60.0))
    report = worker.run(job.job_id)
    assert (report.result, report.checkpoint) == ("retrying", 6)
    assert report.outcomes == {"applied": 5, "retryable": 1}
    results = harness.results(job)
    assert results["p3"][:3] == ("retryable", 1, "INTERNAL_ERROR")
    assert {k for k, v in results.items() if v[0] == "applied"} == {"p0", "p1", "p2", "p4", "p5"}
    assert len(set(_transactions(harness, job).values())) == 6  # one by one
    assert len(harness.snapshot("t1")["decisions"]) == 1 + 5  # the rule's, then one each

    harness.make_due()
    assert harness.worker().run(job.job_id).result == "done"
    converged(harness)


def test_a_product_identified_by_an_earlier_one_of_its_batch_starts_the_next(
    harness: Harness,
) -> None:
    """'y' states the sku 'x' just created an item for: the item 'x' created must be
    what 'y' finds, so 'y' cannot use what its batch read before 'x' was written."""
    y = {**product("y"), "sku": "x"}
    products = [product("w"), product("x"), y, product("z")]
    job = _twin(harness, products, batch=50)
    report = harness.worker().run(job.job_id)
    assert (report.result, report.checkpoint) == ("done", 4)
    assert report.outcomes == {"applied": 4}
    by = _transactions(harness, job)
    assert by["w"] == by["x"] != by["y"] == by["z"]
    results = harness.results(job)
    assert results["y"][3] == results["x"][3] == harness.item("x")  # one item, two listings
    converged(harness)


@pytest.mark.parametrize("batch", [2, 3])
def test_batches_of_any_size_reach_the_state_of_one_by_one(harness: Harness, batch: int) -> None:
    products = [product(f"p{n}", size=str(n)) for n in range(7)]
    products += [{**product("q1"), "sku": "p2"}, {**product("q2"), "sku": "p6"}]
    job = _twin(harness, products, batch=batch)
    assert harness.worker().run(job.job_id).result == "done"
    converged(harness)


def test_a_key_refused_late_in_a_batch_sends_it_one_by_one(harness: Harness) -> None:
    """A batch sends a product's identity key without waiting for it; when the
    database refuses the key, a later statement raises it and the batch rolls back.
    One by one, the refusal is the product's own IDENTITY_CONFLICT, raised where
    it happened, and the others settle as they would alone."""
    products = [product(f"p{n}") for n in range(5)]
    job = _twin(harness, products, batch=50)  # t2, one by one: all applied
    with harness.conn() as conn:
        row = conn.execute(
            "SELECT k.identity_hash FROM identity_key k JOIN listing_mapping m"
            " USING (tenant_id, catalog_id, item_id)"
            " WHERE k.tenant_id = 't2' AND m.listing_id = 'shop:p3'"
        ).fetchone()
        assert row is not None
        # A unique-index refusal of p3's key in t1, raised by PostgreSQL itself.
        conn.execute(
            "CREATE FUNCTION refuse_p3_key() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN RAISE unique_violation USING CONSTRAINT = 'identity_key_unique_hash',"
            " MESSAGE = 'refused by the test'; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse_p3_key BEFORE INSERT ON identity_key FOR EACH ROW"
            f" WHEN (NEW.tenant_id = 't1' AND NEW.identity_hash = '{row[0]}')"
            " EXECUTE FUNCTION refuse_p3_key()"
        )
    try:
        report = harness.worker().run(job.job_id)
    finally:
        with harness.conn() as conn:
            conn.execute("DROP TRIGGER refuse_p3_key ON identity_key")
            conn.execute("DROP FUNCTION refuse_p3_key()")
    # A conflict is a race another writer may have lost by now: retried later.
    assert (report.result, report.checkpoint) == ("retrying", 5)
    assert report.outcomes == {"applied": 4, "retryable": 1}
    results = harness.results(job)
    assert results["p3"][:3] == ("retryable", 1, "IDENTITY_CONFLICT")
    assert len(set(_transactions(harness, job).values())) == 5  # one by one
    snapshot = harness.snapshot("t1")
    assert len(snapshot["decisions"]) == 1 + 4  # the rule's, then one per applied product
    assert [p for _, p, _ in snapshot["outbox"]] == list(range(1, len(snapshot["outbox"]) + 1))
