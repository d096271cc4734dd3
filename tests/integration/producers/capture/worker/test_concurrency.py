"""Workers overlapping on the same jobs: duplicate deliveries, a run whose claim ran
out while it kept going, two workers at the object-store concurrency limit, and
stale work finishing after newer work."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from typing import Any

from db.objects import s3_client
from producers.capture.adapters import Extraction
from producers.capture.worker.objects import ClusterSlots, EvidenceReader
from producers.capture.worker.resolution import RESOLVE, ItemWork, Plan
from tests.fixtures.waits import lock_waiters, wait_for

from .conftest import T0, Harness, Parser, product


def one_effect_per_product(harness: Harness, tenant: str = "t1") -> None:
    """Every applied result has exactly one decision; every item is at revision 1;
    the outbox is contiguous."""
    state = harness.snapshot(tenant)
    applied = [r for r in state["results"] if r[4] == "applied"]
    resolved = [d for d in state["decisions"] if d[1] == "capture.resolve"]
    assert len(resolved) == len(applied)
    assert sorted(r[7] for r in applied) == sorted(d[0] for d in resolved)
    assert {i[5] for i in state["items"]} == {1}
    assert [p for _, p, _ in state["outbox"]] == list(range(1, len(state["outbox"]) + 1))


def test_concurrent_duplicate_deliveries_leave_one_effect(harness: Harness) -> None:
    harness.bind()
    harness.activate()
    job = harness.capture([product(f"p{n}") for n in range(6)])
    workers = [harness.worker() for _ in range(6)]
    start = threading.Barrier(len(workers))

    def deliver(index: int) -> str:
        start.wait()
        return workers[index].run(job.job_id).result

    with ThreadPoolExecutor(len(workers)) as pool:
        results = Counter(pool.map(deliver, range(len(workers))))
    assert results == {"done": 1, "not_claimed": 5}
    assert harness.job(job)["runs"] == 1
    assert len(harness.results(job)) == 6
    one_effect_per_product(harness)


def test_a_run_that_lost_its_claim_never_overwrites_the_winner(harness: Harness) -> None:
    """Worker A stalls inside its first product (its batch holds all four); its claim
    runs out; worker B claims the job and reaches the same products, which wait on
    A's row locks. A commits, B finds them settled, and B's checkpoint move (from the
    value it loaded, 0) loses to A's: B gets the persisted winner and stops. A cannot
    record the end of a run it no longer owns; the next run finishes the job."""
    harness.bind()
    harness.activate()
    job = harness.capture([product(f"p{n}") for n in range(4)])
    b_started = threading.Event()
    reports: dict[str, Any] = {}

    def stalling(uow: Any, work: ItemWork) -> Plan:
        if work.product.source_item_id == "p0" and not b_started.is_set():
            harness.expire_claims()
            b_started.set()
            # B claims, reads, parses and blocks on p0's row, which this run holds.
            wait_for(
                lambda: lock_waiters(harness.db.resolver_owner_dsn) > 0,
                "worker B waiting on p0's row",
                60,
            )
        return RESOLVE(uow, work)

    a, b = harness.worker("A", resolve=stalling), harness.worker("B")

    def run_b() -> None:
        b_started.wait(30)
        reports["B"] = b.run(job.job_id)

    thread = threading.Thread(target=run_b)
    thread.start()
    reports["A"] = a.run(job.job_id)
    thread.join(30)
    assert (reports["B"].result, reports["B"].checkpoint) == ("stale", 4)
    assert reports["A"].result == "claim_lost"
    assert reports["A"].outcomes == {"applied": 4}
    assert reports["B"].outcomes == {}
    assert harness.checkpoint(job) == 4
    assert harness.job(job)["status"] == "retrying"  # B handed the job back
    assert harness.worker("C").run(job.job_id).result == "done"
    one_effect_per_product(harness)


class CountingClient:
    """The real S3 client, counting the reads in flight (per worker and overall) and
    holding each a little, so overlapping workers really overlap."""

    def __init__(
        self,
        real: Any,
        name: str,
        counts: dict[str, int],
        peaks: dict[str, int],
        lock: threading.Lock,
    ) -> None:
        self._real, self._name = real, name
        self._counts, self._peaks, self._lock = counts, peaks, lock

    def get_object(self, **kwargs: Any) -> Any:
        with self._lock:
            for key in (self._name, "all"):
                self._counts[key] += 1
                self._peaks[key] = max(self._peaks[key], self._counts[key])
        try:
            time.sleep(0.2)
            return self._real.get_object(**kwargs)
        finally:
            with self._lock:
                for key in (self._name, "all"):
                    self._counts[key] -= 1


def test_two_workers_at_the_concurrency_limit_stay_bounded_and_agree(harness: Harness) -> None:
    harness.bind()
    harness.activate()
    jobs = [harness.capture([product(f"j{n}-a"), product(f"j{n}-b")]) for n in range(10)]
    counts: Counter[str] = Counter()
    peaks: Counter[str] = Counter()
    lock = threading.Lock()
    # Each worker as its own process would have it: its client, its slot connections.
    slots = {
        name: ClusterSlots(harness.db.resolver_dsn, limit=3, connections=2) for name in ("W1", "W2")
    }
    workers = [
        harness.worker(
            name,
            reader=EvidenceReader(
                CountingClient(s3_client(harness.settings), name, counts, peaks, lock),  # type: ignore[arg-type]
                harness.reader.bucket,
                max_concurrency=2,
                cluster=slots[name],
            ),
        )
        for name in slots
    ]
    # Every job is delivered to both workers: first each job to one of them, in
    # turns (so both have more work than read slots), then every job to the other.
    first = [(workers[n % 2], j.job_id) for n, j in enumerate(jobs)]
    deliveries = first + [(workers[(n + 1) % 2], j.job_id) for n, j in enumerate(jobs)]
    try:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda d: d[0].run(d[1]).result, deliveries))
    finally:
        for cluster in slots.values():
            cluster.close()
    assert peaks["W1"] <= 2 and peaks["W2"] <= 2  # each worker's own limit
    assert peaks["all"] <= 3  # the cluster's limit across both
    assert peaks["all"] == 3  # they did overlap, up to the limit
    assert Counter(results)["done"] == len(jobs)
    assert set(results) <= {"done", "not_claimed"}
    for job in jobs:
        assert harness.checkpoint(job) == 2
    one_effect_per_product(harness)


def test_an_older_capture_finishing_late_cannot_overwrite_newer_state(harness: Harness) -> None:
    harness.bind()
    harness.activate()
    older = harness.capture([product("x", "old title")], captured_at=T0)
    newer = harness.capture([product("x", "new title")], captured_at=T0 + timedelta(hours=1))
    assert harness.worker().run(newer.job_id).result == "done"
    assert harness.worker().run(older.job_id).result == "done"
    item = harness.item("x")
    assert harness.results(older)["x"] == ("superseded", 0, None, item)
    [row] = harness.snapshot()["items"]
    assert (row[3], row[5]) == ("new title", 1)
    with harness.conn() as conn:
        state = conn.execute("SELECT capture_id FROM source_item_state").fetchall()
    assert state == [(newer.capture_id,)]


def test_an_older_parser_finishing_late_cannot_overwrite_a_newer_ones_result(
    harness: Harness,
) -> None:
    """Parser version 1 claims the job and stalls after parsing; its claim runs out
    and a version-2 worker runs the whole job. Version 1's results then land as
    ``superseded``: the item keeps version 2's title."""
    harness.bind()
    harness.activate()
    job = harness.capture([product("x", "Title"), product("y", "Other")])
    v2 = harness.worker("v2", parse=Parser(parser_version=2))

    def old_parser(*args: Any) -> Extraction:
        extraction = Parser(parser_version=1)(*args)
        harness.expire_claims()
        assert v2.run(job.job_id).result == "done"
        # The old parser read titles differently.
        return replace(
            extraction,
            products=tuple(replace(p, title=p.title.upper()) for p in extraction.products),
        )

    report = harness.worker("v1", parse=old_parser).run(job.job_id)
    assert report.result == "claim_lost"
    assert report.outcomes == {"superseded": 2}
    titles = sorted(i[3] for i in harness.snapshot()["items"])
    assert titles == ["Other", "Title"]
    with harness.conn() as conn:
        rows = conn.execute(
            "SELECT source_item_id, parser_version, outcome FROM capture_item ORDER BY 1, 2"
        ).fetchall()
    assert rows == [
        ("x", 1, "superseded"),
        ("x", 2, "applied"),
        ("y", 1, "superseded"),
        ("y", 2, "applied"),
    ]
    assert harness.job(job)["status"] == "done"


def test_a_duplicate_message_for_an_unknown_job_is_ignored(harness: Harness) -> None:
    assert harness.worker().run(uuid.uuid4()).result == "not_claimed"


def test_a_replay_under_a_newer_parser_applies_what_it_reads_differently(
    harness: Harness, monkeypatch: Any
) -> None:
    """The parser is bumped (version 2 reads titles upper-cased): replaying the
    newest capture applies the new reading; replaying an older one is superseded."""
    from producers.capture.adapters.json_feed import JsonFeedAdapter
    from producers.capture.worker.replays import request_replay

    harness.bind()
    harness.activate()
    older = harness.capture([product("x", "old")], captured_at=T0)
    newer = harness.capture([product("x", "new")], captured_at=T0 + timedelta(hours=1))
    for job in (older, newer):
        assert harness.worker().run(job.job_id).result == "done"
    monkeypatch.setattr(JsonFeedAdapter, "parser_version", 2)

    def upper(*args: Any) -> Extraction:
        extraction = Parser(parser_version=2)(*args)
        return replace(
            extraction,
            products=tuple(replace(p, title=p.title.upper()) for p in extraction.products),
        )

    v2 = harness.worker(parse=upper)
    with harness.conn() as conn:
        replays = [request_replay(conn, "t1", j.capture_id, "ana").job_id for j in (newer, older)]
    assert [v2.run(r).outcomes for r in replays] == [{"applied": 1}, {"superseded": 1}]
    [item] = harness.snapshot()["items"]
    assert (item[3], item[5]) == ("NEW", 3)  # old, new, then the new reading of new
    with harness.conn() as conn:
        kinds = conn.execute("SELECT kind FROM intake_job ORDER BY kind").fetchall()
    assert kinds == [("capture.process",)] * 2 + [("capture.replay.v2",)] * 2
