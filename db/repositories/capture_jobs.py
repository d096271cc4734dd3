"""SQL for the capture worker's side of ``intake_job``: claims under a lease, renewals,
the end of a run, the repair scan and operator repairs of whole jobs.

Every function runs in the caller's transaction (``Transaction`` wraps any psycopg
connection). Times come from the database clock, so every worker agrees on when a
lease has expired and when a retry is due.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from db.unit_of_work import Transaction

# A job a worker may take now: never run, or due for a retry, or abandoned by a
# worker whose lease ran out. Finished jobs and jobs under a live lease are not.
_CLAIMABLE = (
    "(status IN ('pending', 'enqueued')"
    " OR (status = 'retrying' AND next_attempt_at <= clock_timestamp())"
    " OR (status = 'running' AND lease_expires_at <= clock_timestamp()))"
)


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A job under this worker's lease, with the capture it is about."""

    job_id: uuid.UUID
    tenant_id: str
    kind: str
    runs: int
    run_failures: int
    capture_id: uuid.UUID
    source: str
    instance_id: str
    schema_version: int
    source_url: str
    captured_at: datetime
    created_at: datetime  # when the capture arrived: identity generations pin to it
    content_type: str
    content_sha256: str
    size_bytes: int
    evidence_key: str


def claim(
    tx: Transaction, job_id: uuid.UUID, kinds: Sequence[str], owner: str, lease_seconds: float
) -> ClaimedJob | None:
    """Take the job under a lease if it is claimable now and of one of ``kinds`` (LIKE
    patterns); None otherwise.

    The UPDATE is the compare-and-set: of two workers claiming the same job, the
    second waits for the first's row lock, re-reads the row (now ``running`` under a
    live lease) and matches nothing.
    """
    row = tx.execute(
        "WITH claimed AS ("
        " UPDATE intake_job SET status = 'running', lease_owner = %s,"
        " lease_expires_at = clock_timestamp() + make_interval(secs => %s), runs = runs + 1"
        f" WHERE job_id = %s AND kind LIKE ANY(%s) AND {_CLAIMABLE}"
        " RETURNING job_id, tenant_id, kind, runs, run_failures, capture_id)"
        " SELECT j.job_id, j.tenant_id, j.kind, j.runs, j.run_failures, c.capture_id, c.source,"
        " c.instance_id, c.schema_version, c.source_url, c.captured_at, c.created_at,"
        " c.content_type, c.content_sha256, c.size_bytes, c.evidence_key"
        " FROM claimed j JOIN capture c"
        " ON c.tenant_id = j.tenant_id AND c.capture_id = j.capture_id",
        (owner, lease_seconds, job_id, list(kinds)),
    ).fetchone()
    return ClaimedJob(*row) if row else None


def renew(tx: Transaction, job_id: uuid.UUID, owner: str, lease_seconds: float) -> bool:
    """Extend this worker's lease; False when it has lost the job (the lease ran out
    and another worker claimed it, or an operator acted on it)."""
    row = tx.execute(
        "UPDATE intake_job SET lease_expires_at = clock_timestamp() + make_interval(secs => %s)"
        " WHERE job_id = %s AND status = 'running' AND lease_owner = %s RETURNING 1",
        (lease_seconds, job_id, owner),
    ).fetchone()
    return row is not None


def finish(
    tx: Transaction,
    job_id: uuid.UUID,
    owner: str,
    status: str,
    *,
    retry_in_seconds: float | None = None,
    retry_at: datetime | None = None,
    error_code: str | None = None,
    error: str | None = None,
    count_failure: bool = False,
) -> bool:
    """End this worker's run: ``done``, ``failed``, or ``retrying`` after
    ``retry_in_seconds`` (or at ``retry_at``). False (and nothing changed) when the
    lease was lost.
    ``count_failure`` counts a job-level failure against the job's retry budget."""
    if status not in ("done", "failed", "retrying"):
        raise ValueError(f"a run cannot end as {status!r}")
    row = tx.execute(
        "UPDATE intake_job SET status = %s, lease_owner = NULL, lease_expires_at = NULL,"
        " next_attempt_at = coalesce(%s::timestamptz,"
        " clock_timestamp() + make_interval(secs => %s::float8), next_attempt_at),"
        " error_code = %s, last_error = %s, run_failures = run_failures + %s,"
        " finished_at = CASE WHEN %s IN ('done', 'failed') THEN clock_timestamp() END"
        " WHERE job_id = %s AND status = 'running' AND lease_owner = %s RETURNING 1",
        (
            status,
            retry_at,
            retry_in_seconds,
            error_code,
            error,
            1 if count_failure else 0,
            status,
            job_id,
            owner,
        ),
    ).fetchone()
    return row is not None


def due(
    tx: Transaction,
    kinds: Sequence[str],
    orphaned_after_seconds: float,
    after: uuid.UUID | None,
    limit: int,
) -> list[uuid.UUID]:
    """A page of jobs the repair scan should claim, in job-id order after ``after``:
    retries that are due, runs whose lease expired, and enqueued jobs no worker has
    taken for ``orphaned_after_seconds`` (their message was lost or is late)."""
    rows = tx.execute(
        "SELECT job_id FROM intake_job"
        " WHERE status IN ('enqueued', 'running', 'retrying') AND kind LIKE ANY(%s)"
        " AND job_id > %s AND ("
        " (status = 'retrying' AND next_attempt_at <= clock_timestamp())"
        " OR (status = 'running' AND lease_expires_at <= clock_timestamp())"
        " OR (status = 'enqueued' AND coalesce(enqueued_at, created_at)"
        "     <= clock_timestamp() - make_interval(secs => %s)))"
        " ORDER BY job_id LIMIT %s",
        (list(kinds), after or uuid.UUID(int=0), orphaned_after_seconds, limit),
    ).fetchall()
    return [r[0] for r in rows]


@dataclass(frozen=True, slots=True)
class JobState:
    job_id: uuid.UUID
    tenant_id: str
    capture_id: uuid.UUID
    kind: str
    status: str
    runs: int
    run_failures: int
    error_code: str | None
    last_error: str | None
    lease_owner: str | None
    next_attempt_at: datetime
    finished_at: datetime | None


_STATE = (
    "job_id, tenant_id, capture_id, kind, status, runs, run_failures, error_code, last_error,"
    " lease_owner, next_attempt_at, finished_at"
)


def get(tx: Transaction, job_id: uuid.UUID, lock: bool = False) -> JobState | None:
    row = tx.execute(
        f"SELECT {_STATE} FROM intake_job WHERE job_id = %s" + (" FOR UPDATE" if lock else ""),
        (job_id,),
    ).fetchone()
    return JobState(*row) if row else None


def failed_jobs(
    tx: Transaction, tenant_id: str | None, after: uuid.UUID | None, limit: int
) -> list[JobState]:
    """Jobs that ended ``failed``, in job-id order after ``after`` (a bounded page)."""
    rows = tx.execute(
        f"SELECT {_STATE} FROM intake_job WHERE status = 'failed'"
        " AND (%s::text IS NULL OR tenant_id = %s) AND job_id > %s ORDER BY job_id LIMIT %s",
        (tenant_id, tenant_id, after or uuid.UUID(int=0), limit),
    ).fetchall()
    return [JobState(*r) for r in rows]


def insert_pending(
    tx: Transaction, job_id: uuid.UUID, tenant_id: str, capture_id: uuid.UUID, kind: str
) -> bool:
    """A new job of ``kind`` on the capture, pending and due now (the sweeper enqueues
    it); False when the capture already has a job of that kind."""
    row = tx.execute(
        "INSERT INTO intake_job (job_id, tenant_id, capture_id, kind, status, attempts,"
        " next_attempt_at) VALUES (%s, %s, %s, %s, 'pending', 0, clock_timestamp())"
        " ON CONFLICT DO NOTHING RETURNING 1",
        (job_id, tenant_id, capture_id, kind),
    ).fetchone()
    return row is not None


def requeue(tx: Transaction, job_id: uuid.UUID) -> bool:
    """An operator's retry: a ``failed`` job becomes due now with a fresh job-level
    budget. False when the job is not failed (nothing changed)."""
    row = tx.execute(
        "UPDATE intake_job SET status = 'retrying', next_attempt_at = clock_timestamp(),"
        " run_failures = 0, error_code = NULL, last_error = NULL, finished_at = NULL"
        " WHERE job_id = %s AND status = 'failed' RETURNING 1",
        (job_id,),
    ).fetchone()
    return row is not None


def reopen_finished(tx: Transaction, job_id: uuid.UUID) -> bool:
    """A finished job whose items an operator re-queued runs again now."""
    row = tx.execute(
        "UPDATE intake_job SET status = 'retrying', next_attempt_at = clock_timestamp(),"
        " finished_at = NULL WHERE job_id = %s AND status IN ('done', 'failed') RETURNING 1",
        (job_id,),
    ).fetchone()
    return row is not None


def skip(tx: Transaction, job_id: uuid.UUID) -> bool:
    """An operator gives a ``failed`` job up (the audit row is the caller's)."""
    row = tx.execute(
        "UPDATE intake_job SET status = 'skipped', finished_at = clock_timestamp()"
        " WHERE job_id = %s AND status = 'failed' RETURNING 1",
        (job_id,),
    ).fetchone()
    return row is not None


def done_after_repair(tx: Transaction, job_id: uuid.UUID) -> None:
    """A failed job whose last failed product an operator skipped is ``done``."""
    tx.execute(
        "UPDATE intake_job SET status = 'done', error_code = NULL, last_error = NULL"
        " WHERE job_id = %s AND status = 'failed'",
        (job_id,),
    )


def record_repair(
    tx: Transaction,
    tenant_id: str,
    job_id: uuid.UUID,
    capture_item_id: int | None,
    action: str,
    actor: str,
    reason: str,
) -> None:
    tx.execute(
        "INSERT INTO capture_repair (tenant_id, job_id, capture_item_id, action, actor, reason)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        (tenant_id, job_id, capture_item_id, action, actor, reason),
    )
