"""A schema registry that does not answer holds a capture up; it never fails it.

The worker writes its decisions' events through the registry (the Confluent framing).
While the registry is unreachable (here: a real client pointed at a port nothing
listens on), each run stops at the first product it cannot encode: the products
settled so far stay settled, the checkpoint holds, the job is ``retrying`` with
``REGISTRY_UNAVAILABLE`` and neither the job nor any product is charged an attempt,
however long the outage lasts. Once the registry answers, the next run settles every
product, each in its first attempt.
"""

from __future__ import annotations

from infra.processes import free_port
from schemas.registry_codec import RegistryCodec, registry_client

from .conftest import Harness, product

OUTAGE_RUNS = 5
"""More runs than the retry budgets (3), to show that none of them is charged."""


def test_runs_during_a_registry_outage_charge_nothing_and_the_capture_settles_after(
    harness: Harness, registry_url: str
) -> None:
    harness.bind()
    harness.activate()
    job = harness.capture([product("a"), product("b"), product("c")])
    unreachable = RegistryCodec(registry_client(f"http://127.0.0.1:{free_port()}", 1.0))
    cut_off = harness.worker(codec=unreachable)
    for _ in range(OUTAGE_RUNS):
        harness.make_due()
        report = cut_off.run(job.job_id)
        assert (report.result, report.error_code) == (
            "registry_unavailable",
            "REGISTRY_UNAVAILABLE",
        )
        state = harness.job(job)
        assert (state["status"], state["error_code"], state["run_failures"]) == (
            "retrying",
            "REGISTRY_UNAVAILABLE",
            0,
        )
        # The first product never got an outcome: its attempt rolled back whole.
        assert harness.results(job) == {}
        assert harness.checkpoint(job) == 0

    harness.make_due()
    back = harness.worker(codec=RegistryCodec(registry_client(registry_url)))
    assert back.run(job.job_id).result == "done"
    assert {k: v[:3] for k, v in harness.results(job).items()} == {
        "a": ("applied", 0, None),
        "b": ("applied", 0, None),
        "c": ("applied", 0, None),
    }
    state = harness.job(job)
    assert (state["status"], state["run_failures"]) == ("done", 0)
