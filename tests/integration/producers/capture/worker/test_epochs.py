"""Capture work across a history fence and a restore, against real PostgreSQL, Kafka
and S3.

- A job accepted before the fence and run after it lands in the current epoch,
  from position 1; nothing is written into the fenced stream.
- A job the worker holds mid-flight across the fence: the product whose transaction
  holds the old cursor commits before the fence (the fence waits for it); every
  later product goes to the new epoch.
- A job message whose row the restored database no longer has (accepted after the
  backup), and a job whose row goes while a run has it in hand, end ``unknown_job``
  with the stable code ``JOB_GONE``, recorded in ``unknown_job_message``; the
  worker goes on.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import psycopg
import pytest

from db.control.epochs import issue_next
from db.resolver.fencing import Fenced, fence_older_epochs
from db.unit_of_work import UnitOfWork
from producers.capture.adapters import Extraction
from producers.capture.worker.outcomes import JOB_GONE
from producers.capture.worker.resolution import RESOLVE, ItemWork, Plan
from schemas.jobs import JobMessage

from .conftest import Harness, Job, product
from .test_consumer import running_loop, wait_for


def fence(harness: Harness) -> list[Fenced]:
    """What ``gapless fence-epoch`` does first: epoch 2 issued, epoch 1 fenced."""
    with psycopg.connect(harness.db.control_dsn) as conn:
        assert issue_next(conn, "t1", "c1", 1, "operator:test", "restored").epoch == 2
        conn.commit()
    with psycopg.connect(harness.db.resolver_owner_dsn) as conn:
        fenced = fence_older_epochs(conn, "t1", "c1", 2)
        conn.commit()
    return fenced


def outbox(harness: Harness) -> dict[int, list[int]]:
    """Positions per history epoch of the tenant's catalog."""
    with harness.conn() as conn:
        rows = conn.execute(
            "SELECT history_epoch, position FROM outbox WHERE tenant_id = 't1'"
            " AND catalog_id = 'c1' ORDER BY history_epoch, position"
        ).fetchall()
    found: dict[int, list[int]] = {}
    for epoch, position in rows:
        found.setdefault(int(epoch), []).append(int(position))
    return found


def unknown(harness: Harness) -> list[tuple[Any, ...]]:
    with harness.conn() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                "SELECT job_id, tenant_id, capture_id, kind, found_by, error_code, times_seen"
                " FROM unknown_job_message ORDER BY job_id"
            ).fetchall()
        ]


def restore_to_before(harness: Harness, job: Job) -> None:
    """What a restore from a backup taken before the capture was accepted leaves of
    it in the resolver database: nothing (its evidence stays in the bucket)."""
    with harness.conn() as conn:
        for table in ("receipt", "intake_job", "capture"):
            conn.execute(
                f"DELETE FROM {table} WHERE tenant_id = %s AND capture_id = %s",
                (job.tenant_id, job.capture_id),
            )


def test_a_job_accepted_before_the_fence_lands_in_the_current_epoch(harness: Harness) -> None:
    harness.bind()
    harness.activate()
    job = harness.capture([product("a"), product("b")])
    before = outbox(harness)
    (fenced,) = fence(harness)
    assert fenced.position == before[1][-1]

    report = harness.worker().run(job.job_id)

    assert report.result == "done"
    assert {r[0] for r in harness.results(job).values()} == {"applied"}
    after = outbox(harness)
    assert after[1] == before[1]  # nothing more in the fenced stream
    assert after[2] == list(range(1, 7))  # two decisions of three events each, from 1
    assert unknown(harness) == []


def _waiting_on_a_lock(harness: Harness) -> None:
    deadline = time.monotonic() + 30
    with harness.conn() as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = current_database()"
            ).fetchone()
            if row and row[0] > 0:
                return
            assert time.monotonic() < deadline, "the fence never waited"
            time.sleep(0.01)


@pytest.mark.parametrize("batch", [1, 50])
def test_a_job_held_mid_flight_across_the_fence_never_writes_into_the_fenced_stream(
    harness: Harness, batch: int
) -> None:
    harness.bind()
    harness.activate()
    job = harness.capture([product("a"), product("b"), product("c")])
    before = outbox(harness)
    holding, release = threading.Event(), threading.Event()

    def resolve(uow: UnitOfWork, work: ItemWork) -> Plan:
        if work.product.source_item_id == "b":  # its transaction holds the old cursor
            holding.set()
            assert release.wait(30)
        return RESOLVE(uow, work)

    reports: list[Any] = []
    worker = harness.worker(resolve=resolve, settle_batch=batch)
    run = threading.Thread(target=lambda: reports.append(worker.run(job.job_id)))
    run.start()
    assert holding.wait(30)
    fenced: list[list[Fenced]] = []
    fencing = threading.Thread(target=lambda: fenced.append(fence(harness)))
    fencing.start()
    _waiting_on_a_lock(harness)  # the fence waits for the product's transaction
    assert not fenced
    release.set()
    run.join(60)
    fencing.join(60)

    assert reports[0].result == "done"
    assert {r[0] for r in harness.results(job).values()} == {"applied"}
    after = outbox(harness)
    # One product per transaction: "a" and "b" committed into epoch 1 before the
    # fence took effect; the fence ends its history there; "c" went to epoch 2 from
    # position 1. One batch: the three committed into epoch 1 together.
    in_epoch_1 = 2 if batch == 1 else 3
    assert after[1] == list(range(1, before[1][-1] + 3 * in_epoch_1 + 1))
    assert [f.position for f in fenced[0]] == [after[1][-1]]
    assert after.get(2, []) == list(range(1, 3 * (3 - in_epoch_1) + 1))


def test_a_job_message_the_restored_database_has_no_row_of_is_recorded_not_dropped(
    harness: Harness,
) -> None:
    harness.bind()
    harness.activate()
    lost = harness.capture([product("lost")])  # its message is on the jobs topic
    restore_to_before(harness, lost)
    kept = harness.capture([product("kept")])
    with running_loop(harness):
        wait_for(lambda: harness.job(kept)["status"] == "done" and bool(unknown(harness)))
    assert unknown(harness) == [
        (lost.job_id, "t1", lost.capture_id, "capture.process", "message", JOB_GONE, 1)
    ]
    # The same message again (a redelivery): counted, not recorded twice.
    report = harness.worker().run(
        lost.job_id, JobMessage(lost.job_id, "capture.process", "t1", lost.capture_id)
    )
    assert (report.result, report.error_code) == ("unknown_job", JOB_GONE)
    assert unknown(harness)[0][-1] == 2
    # Asked by id alone (as the repair scan asks for rows it found), nothing is
    # known of it to record: not claimed, as before.
    assert harness.worker().run(uuid.uuid4()).result == "not_claimed"


def test_a_job_whose_row_goes_while_a_run_has_it_is_recorded_not_dropped(
    harness: Harness,
) -> None:
    harness.bind()
    harness.activate()
    job = harness.capture([product("a"), product("b")])
    parsed, release = threading.Event(), threading.Event()

    def parse(adapter: str, artifact: bytes, content_type: str, source_url: str) -> Extraction:
        extraction = harness.parser(adapter, artifact, content_type, source_url)
        parsed.set()  # no transaction open: the restore can take the rows
        assert release.wait(30)
        return extraction

    reports: list[Any] = []
    worker = harness.worker(parse=parse)
    run = threading.Thread(target=lambda: reports.append(worker.run(job.job_id)))
    run.start()
    assert parsed.wait(30)
    before = outbox(harness)
    restore_to_before(harness, job)
    release.set()
    run.join(60)

    assert (reports[0].result, reports[0].error_code) == ("unknown_job", JOB_GONE)
    assert outbox(harness) == before  # nothing of it was committed
    assert unknown(harness) == [
        (job.job_id, "t1", job.capture_id, "capture.process", "run", JOB_GONE, 1)
    ]
