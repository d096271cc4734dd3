"""``gapless sources`` and ``gapless captures``: the operators' side of the worker."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from click.testing import CliRunner, Result

from infra.cli.main import main
from producers.capture.worker.resolution import RESOLVE, ItemWork, Plan
from producers.capture.worker.retries import RetryPolicy

from .conftest import Harness, product


def cli(*args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(main, list(args), env={"GAPLESS_OPERATOR": "ana"})
    assert result.exit_code == code, result.output
    return result


def test_sources_register_is_idempotent_and_refuses_a_rebinding(harness: Harness) -> None:
    register = ("sources", "register", "--tenant", "t1", "--source", "shop", "--catalog", "c1")
    assert "catalog c1, adapter json-feed" in cli(*register, "--adapter", "json-feed").output
    cli(*register, "--adapter", "json-feed")
    refused = cli(*register, "--adapter", "html-jsonld", code=2)
    assert "already bound to catalog 'c1' with adapter 'json-feed'" in refused.output
    unknown = cli(
        "sources",
        "register",
        "--tenant",
        "t1",
        "--source",
        "other",
        "--catalog",
        "c1",
        "--adapter",
        "nope",
        code=2,
    )
    assert "no adapter is named 'nope'" in unknown.output
    [line] = cli("sources", "list", "--json").output.splitlines()
    assert json.loads(line) | {"created_at": None} == {
        "tenant": "t1",
        "source": "shop",
        "catalog": "c1",
        "adapter": "json-feed",
        "registered_by": "ana",
        "created_at": None,
    }


def test_failures_are_listed_retried_and_skipped(harness: Harness) -> None:
    harness.bind()
    harness.activate()
    unbound = harness.capture([product("z")], tenant="t2")
    job = harness.capture([product("a"), product("b")])
    broken = {"a"}

    def resolve(uow: Any, work: ItemWork) -> Plan:
        if work.product.source_item_id in broken:
            raise RuntimeError("password=hunter2 rejected")
        return RESOLVE(uow, work)

    worker = harness.worker(resolve=resolve, item_retries=RetryPolicy(1, 0.01, 0.01))
    assert worker.run(job.job_id).result == "failed"
    harness.worker().run(unbound.job_id)

    listed = [
        json.loads(line) for line in cli("captures", "failures", "--json").output.splitlines()
    ]
    kinds = sorted((f["kind"], f["error_code"], f["tenant"]) for f in listed)
    assert kinds == [
        ("item", "INTERNAL_ERROR", "t1"),
        ("job", "ITEMS_FAILED", "t1"),
        ("job", "SOURCE_NOT_BOUND", "t2"),
    ]
    assert all("hunter2" not in (f["error"] or "") for f in listed)
    item = next(f for f in listed if f["kind"] == "item")
    assert "INTERNAL_ERROR" in cli("captures", "failures").output
    assert "t2" not in cli("captures", "failures", "--tenant", "t1").output

    broken.clear()  # the fix
    retried = cli("captures", "retry", item["id"], "--reason", "fixed the resolver")
    assert f"item #{item['id']}: due now" in retried.output
    assert worker.run(job.job_id).result == "done"
    assert harness.results(job)["a"][0] == "applied"
    cli("captures", "retry", item["id"], code=1)  # no longer failed

    skipped = cli("captures", "skip", str(unbound.job_id), "--reason", "test source, not ours")
    assert "skipped" in skipped.output
    assert harness.job(unbound)["status"] == "skipped"
    assert cli("captures", "failures", "--json").output == ""
    with harness.conn() as conn:
        audit = conn.execute(
            "SELECT action, actor, reason, capture_item_id IS NULL FROM capture_repair ORDER BY id"
        ).fetchall()
    assert audit == [
        ("retry", "ana", "fixed the resolver", False),
        ("skip", "ana", "test source, not ours", True),
    ]


@pytest.mark.parametrize("target", ["not-an-id", "12x"])
def test_a_target_that_is_neither_a_product_nor_a_job_is_refused(
    harness: Harness, target: str
) -> None:
    assert "neither a product id" in cli("captures", "retry", target, code=2).output


def test_a_replay_is_its_own_job_and_changes_nothing_under_the_same_parser(
    harness: Harness,
) -> None:
    harness.bind()
    harness.activate()
    job = harness.capture([product("a"), product("b")])
    assert harness.worker().run(job.job_id).result == "done"
    before = harness.snapshot()

    first = cli("captures", "replay", "--tenant", "t1", str(job.capture_id), "--reason", "check")
    again = cli("captures", "replay", "--tenant", "t1", str(job.capture_id))
    assert "capture.replay.v1 job" in first.output and "requested" in first.output
    assert "already requested" in again.output
    replay = uuid.UUID(first.output.split(" job ")[1].split()[0])
    assert replay != job.job_id
    report = harness.worker().run(replay)
    assert (report.result, report.outcomes, report.checkpoint) == ("done", {}, 2)
    after = harness.snapshot()
    assert {k: v for k, v in after.items() if k not in ("jobs", "checkpoints")} == {
        k: v for k, v in before.items() if k not in ("jobs", "checkpoints")
    }
    unknown = cli("captures", "replay", "--tenant", "t1", str(uuid.uuid4()), code=1)
    assert "NOT_FOUND" in unknown.output
