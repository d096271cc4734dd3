"""One job run end to end: products settled with explicit outcomes, decisions through
the single write path, refusals and failures of the whole capture visible."""

from __future__ import annotations

from prometheus_client import REGISTRY

from producers.capture.exceptions import EvidenceUnavailable

from .conftest import T0, Harness, product


def test_a_run_settles_every_product_and_a_second_delivery_changes_nothing(
    harness: Harness,
) -> None:
    harness.bind()
    harness.activate()
    job = harness.capture(
        [
            product("a", color="red"),
            {"title": "no id"},
            product("b"),
            {**product("c"), "category": "boot"},
        ]
    )
    report = harness.worker().run(job.job_id)
    assert report.result == "done"
    assert report.checkpoint == 3
    a, b = harness.item("a"), harness.item("b")
    assert harness.results(job) == {
        "a": ("applied", 0, None, a),
        "b": ("applied", 0, None, b),
        "c": ("review", 0, "NO_ACTIVE_GENERATION", None),
        "@document#/products/1": ("rejected", 0, "MISSING_FIELD", None),
    }
    state = harness.snapshot()
    assert sorted((i[0], i[3], i[4], i[5]) for i in state["items"]) == sorted(
        [(a, "title of a", {"colour": "red", "sku": "a"}, 1), (b, "title of b", {"sku": "b"}, 1)]
    )
    assert sorted((m[0], m[1]) for m in state["mappings"]) == [("shop:a", a), ("shop:b", b)]
    assert [c[2:] for c in state["cases"]] == [("shop:c", "open", 1)]
    # One decision per applied product, each with its item and mapping event.
    assert len(state["decisions"]) == 3  # the generation's approval, then one per product
    assert [p for _, p, _ in state["outbox"]] == list(range(1, 8))
    assert {d[3][0]["locator"] for d in state["decisions"] if d[1] == "capture.resolve"} == {
        "document#/products/0",
        "document#/products/2",
    }
    assert harness.job(job)["status"] == "done"
    # Each settled product's claims: every field it states, where the page states it
    # (the one the adapter refused has a result and no claims).
    claims = {(c[1], c[3]): (c[4], c[5]) for c in state["claims"]}
    assert {source for source, _ in claims} == {"a", "b", "c"}
    assert claims[("a", "title")] == ("title of a", "document#/products/0")
    assert claims[("a", "attributes.colour")] == ("red", "document#/products/0")
    assert claims[("b", "identifiers.sku")] == ("b", "document#/products/2")
    assert claims[("c", "class_id")] == ("boot", "document#/products/3")
    assert len(claims) == 10

    again = harness.worker().run(job.job_id)
    assert again.result == "not_claimed"
    assert harness.snapshot() == state


def test_a_later_capture_is_unchanged_applied_or_new_per_product(harness: Harness) -> None:
    harness.bind()
    harness.activate()
    first = harness.capture([product("a", color="red"), product("b")])
    assert harness.worker().run(first.job_id).result == "done"
    second = harness.capture(
        [product("a", color="red"), product("b", "renamed"), product("d")],
        captured_at=T0.replace(hour=13),
    )
    report = harness.worker().run(second.job_id)
    assert report.result == "done"
    assert {k: v[0] for k, v in harness.results(second).items()} == {
        "a": "unchanged",
        "b": "applied",
        "d": "applied",
    }
    items = {i[0]: (i[3], i[5]) for i in harness.snapshot()["items"]}
    assert items == {
        harness.item("a"): ("title of a", 1),
        harness.item("b"): ("renamed", 2),
        harness.item("d"): ("title of d", 1),
    }


def test_a_source_without_binding_fails_visibly_until_bound_and_retried(harness: Harness) -> None:
    from producers.capture.worker import repair

    harness.activate()
    job = harness.capture([product("a")])
    report = harness.worker().run(job.job_id)
    assert (report.result, report.error_code) == ("failed", "SOURCE_NOT_BOUND")
    state = harness.job(job)
    assert (state["status"], state["error_code"]) == ("failed", "SOURCE_NOT_BOUND")
    assert "gapless sources register" in state["last_error"]
    assert harness.results(job) == {}

    harness.bind()
    with harness.conn() as conn:
        repair.retry_job(conn, job.job_id, "operator", "bound the source")
    assert harness.worker().run(job.job_id).result == "done"
    assert harness.results(job)["a"][0] == "applied"


def test_a_capture_the_adapter_cannot_read_fails_at_once(harness: Harness) -> None:
    harness.bind()
    job = harness.capture([], raw=b"{not json")
    report = harness.worker().run(job.job_id)
    assert (report.result, report.error_code) == ("failed", "MALFORMED_CAPTURE")
    assert harness.job(job)["run_failures"] == 0  # terminal: not counted as a retry


def test_a_missing_artifact_is_flagged_not_ignored(harness: Harness) -> None:
    harness.bind()
    job = harness.capture([product("a")])
    with harness.conn() as conn:
        conn.execute("UPDATE capture SET evidence_key = 'sha256/' || repeat('0', 64)")
    report = harness.worker().run(job.job_id)
    assert (report.result, report.error_code) == ("failed", "EVIDENCE_MISSING")


def test_an_unavailable_object_store_is_retried_within_the_job_budget(harness: Harness) -> None:
    harness.bind()
    job = harness.capture([product("a")])

    class Down:
        calls = 0

        def read(self, key: str, sha256: str) -> bytes:
            Down.calls += 1
            raise EvidenceUnavailable("the object store is down")

    worker = harness.worker(reader=Down())
    results = []
    for _ in range(4):
        harness.make_due()
        results.append(worker.run(job.job_id).result)
    # Budget 3: two retries, then failed; a failed job is not run again.
    assert results == ["retrying", "retrying", "failed", "not_claimed"]
    state = harness.job(job)
    assert (state["status"], state["error_code"], state["run_failures"]) == (
        "failed",
        "EVIDENCE_UNAVAILABLE",
        3,
    )
    assert Down.calls == 3


def test_a_settled_job_is_timed_from_the_capture_s_acceptance(harness: Harness) -> None:
    """``gapless_worker_capture_settle_seconds{result}`` counts the runs that settled
    a job for good (done, failed); a run that leaves it for a retry counts nothing."""

    def settled(result: str) -> float:
        name = "gapless_worker_capture_settle_seconds_count"
        return REGISTRY.get_sample_value(name, {"result": result}) or 0.0

    before = {r: settled(r) for r in ("done", "failed")}
    harness.bind()
    harness.activate()
    done = harness.capture([product("a")])
    assert harness.worker().run(done.job_id).result == "done"
    broken = harness.capture([], raw=b"{not json")
    assert harness.worker().run(broken.job_id).result == "failed"
    assert {r: settled(r) - before[r] for r in before} == {"done": 1, "failed": 1}
