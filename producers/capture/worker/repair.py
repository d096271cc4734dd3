"""The operators' repair path for capture work: list what is waiting on them, retry it
after a fix, or give it up with a reason. Every repair is audited
(``capture_repair``: who, what, why, when).

A retried product or job is due at once; the worker's repair scan (or the next
message for the job) picks it up. A skip is terminal: the product's outcome becomes
``skipped`` and keeps its last error for the record.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import psycopg

from db.repositories import capture_items as items
from db.repositories import capture_jobs as jobs
from db.unit_of_work import Transaction
from producers.capture.exceptions import (
    JobNotFound,
    NotFailed,
    ProductNotFound,
    ProductNotOpen,
    ReasonRequired,
)


@dataclass(frozen=True, slots=True)
class OpenFailure:
    """One thing waiting on a retry or an operator: a product (``item``, with its
    numeric handle) or a whole job (``job``)."""

    kind: str
    handle: str  # the product's id, or the job id
    tenant_id: str
    job_id: uuid.UUID
    capture_id: uuid.UUID
    source_item_id: str | None
    status: str  # the product's outcome or the job's status
    attempts: int
    error_code: str | None
    error: str | None
    next_attempt_at: datetime | None


def open_failures(
    conn: psycopg.Connection, tenant_id: str | None, page_size: int = 500
) -> Iterator[OpenFailure]:
    """Failed jobs, then products waiting on a retry or an operator, page by page."""
    tx = Transaction(conn)
    after_job: uuid.UUID | None = None
    while page := jobs.failed_jobs(tx, tenant_id, after_job, page_size):
        for j in page:
            yield OpenFailure(
                "job",
                str(j.job_id),
                j.tenant_id,
                j.job_id,
                j.capture_id,
                None,
                j.status,
                j.run_failures,
                j.error_code,
                j.last_error,
                None,
            )
        after_job = page[-1].job_id
    after = 0
    while rows := items.open_failures(tx, tenant_id, after, page_size):
        for r in rows:
            yield OpenFailure(
                "item",
                str(r.id),
                r.tenant_id,
                r.job_id,
                r.capture_id,
                r.source_item_id,
                r.outcome,
                r.attempts,
                r.error_code,
                r.last_error,
                r.next_attempt_at,
            )
        after = rows[-1].id


def retry_item(conn: psycopg.Connection, result_id: int, actor: str, reason: str = "") -> None:
    """Give a ``failed`` product a fresh budget, due now, and reopen its job.

    One transaction: 1. lock the job row, then the product's result row (the lock a
    worker takes to work on it, so this waits for a running attempt); 2. make the
    product ``retryable``, due now; 3. reopen a finished job (``retrying``, due now);
    4. audit. Nothing of it is visible before COMMIT.
    """
    with conn.transaction():
        tx = Transaction(conn)
        row = _locked_result(tx, result_id)
        if not items.requeue(tx, result_id):
            raise NotFailed(f"product #{result_id} is {row.outcome}, not failed")
        jobs.reopen_finished(tx, row.job_id)
        jobs.record_repair(tx, row.tenant_id, row.job_id, result_id, "retry", actor, reason)


def skip_item(conn: psycopg.Connection, result_id: int, actor: str, reason: str) -> str:
    """Give a product up for good; returns its job's status afterwards.

    One transaction: 1. lock the job row, then the product's; 2. make the product
    ``skipped`` with who and why (its last error stays); 3. audit; 4. a job that
    failed only for its products, with none left open, is ``done``.
    """
    if not reason.strip():
        raise ReasonRequired("a skip needs a reason")
    with conn.transaction():
        tx = Transaction(conn)
        row = _locked_result(tx, result_id)
        if not items.skip(tx, result_id, actor, reason):
            raise ProductNotOpen(
                f"product #{result_id} is {row.outcome}; only failed or retryable"
                " products can be skipped",
            )
        jobs.record_repair(tx, row.tenant_id, row.job_id, result_id, "skip", actor, reason)
        job = jobs.get(tx, row.job_id)
        assert job is not None
        still_open = [
            r for r in items.of_job(tx, row.job_id) if r.outcome in ("retryable", "failed")
        ]
        if job.status == "failed" and job.error_code == "ITEMS_FAILED" and not still_open:
            jobs.done_after_repair(tx, row.job_id)
            return "done"
        return job.status


def retry_job(conn: psycopg.Connection, job_id: uuid.UUID, actor: str, reason: str = "") -> int:
    """Run a ``failed`` job again now, with fresh budgets for the job and for each of
    its failed products; returns how many products were re-queued. One transaction;
    every repair locks the job row before any product row of the job."""
    with conn.transaction():
        tx = Transaction(conn)
        job = jobs.get(tx, job_id, lock=True)
        if job is None:
            raise JobNotFound(f"no job {job_id}")
        if not jobs.requeue(tx, job_id):
            raise NotFailed(f"job {job_id} is {job.status}, not failed")
        requeued = items.requeue_job(tx, job_id)
        jobs.record_repair(tx, job.tenant_id, job_id, None, "retry", actor, reason)
        return requeued


def skip_job(conn: psycopg.Connection, job_id: uuid.UUID, actor: str, reason: str) -> None:
    """Give a ``failed`` job up for good: in one transaction, lock the job row, mark
    it ``skipped``, skip its open products with the same reason, and audit."""
    if not reason.strip():
        raise ReasonRequired("a skip needs a reason")
    with conn.transaction():
        tx = Transaction(conn)
        job = jobs.get(tx, job_id, lock=True)
        if job is None:
            raise JobNotFound(f"no job {job_id}")
        if not jobs.skip(tx, job_id):
            raise NotFailed(f"job {job_id} is {job.status}, not failed")
        items.skip_open_of_job(tx, job_id, actor, reason)
        jobs.record_repair(tx, job.tenant_id, job_id, None, "skip", actor, reason)


def _locked_result(tx: Transaction, result_id: int) -> items.ResultRow:
    """Lock the product's job row, then the product's row (every repair locks in this
    order, so two operators' repairs of one job cannot deadlock)."""
    found = items.by_id(tx, result_id)
    if found is None:
        raise ProductNotFound(f"no product #{result_id}")
    jobs.get(tx, found.job_id, lock=True)
    row = items.by_id(tx, result_id, lock=True)
    assert row is not None
    return row
