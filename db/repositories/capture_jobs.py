"""Every write of ``intake_job``: the one owner of a job's state, and its reads.

Only this module writes ``intake_job`` rows
(``tests/unit/db/repositories/test_capture_jobs_owner.py`` reads every module to hold
that). The transitions, and who makes them:

* intake (``producers.capture.intake``): a new job is ``pending`` (``insert_pending``;
  replays of stored captures too) until the jobs topic confirms its message
  (``mark_enqueued``: ``pending`` → ``enqueued``); a failed enqueue counts the attempt
  and pushes ``next_attempt_at`` out (``record_enqueue_attempt``,
  ``record_enqueue_error``); the sweeper takes due pending pages for its own enqueue
  (``due_pending``, ``claim_for_enqueue``: the job stays ``pending``).
* the capture worker (``producers.capture.worker``): ``claim`` moves a claimable job
  (``pending``, ``enqueued``, a due ``retrying``, or ``running`` under an expired
  claim) to ``running`` under the worker's claim (``claim_owner`` until
  ``claim_expires_at``); ``renew`` extends the claim while the run works; ``finish``
  ends the run ``done``, ``retrying`` or ``failed`` (only while the claim holds).
  ``due`` is the repair scan's page of jobs to claim.
* operators (``producers.capture.worker.repair``): ``requeue`` (``failed`` →
  ``retrying``), ``reopen_finished`` (``done`` / ``failed`` → ``retrying``), ``skip``
  (``failed`` → ``skipped``), ``done_after_repair`` (``failed`` → ``done``), each
  audited with ``record_repair``.
* the evidence sweep (``producers.capture.evidence_retention``): ``lock_of_capture``
  holds a capture's jobs while it decides, and ``delete_repairs`` and ``delete_of_capture``
  remove them and their repair records with the expired capture.

Every function runs in the caller's transaction (``Transaction`` wraps any psycopg
connection; on an autocommit connection each statement is its own). Times come from
the database clock, so the API, every sweeper and every worker agree on when a job
is due and when a claim has expired.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from db.unit_of_work import Transaction

# A job a worker may take now: never run, or due for a retry, or abandoned by a
# worker whose claim ran out. Finished jobs and jobs under a live claim are not.
_CLAIMABLE = (
    "(status IN ('pending', 'enqueued')"
    " OR (status = 'retrying' AND next_attempt_at <= clock_timestamp())"
    " OR (status = 'running' AND claim_expires_at <= clock_timestamp()))"
)


@dataclass(frozen=True, slots=True)
class JobState:
    job_id: uuid.UUID
    tenant_id: str
    capture_id: uuid.UUID
    kind: str
    status: str
    attempts: int  # enqueue attempts
    runs: int
    run_failures: int
    error_code: str | None
    last_error: str | None
    claim_owner: str | None
    next_attempt_at: datetime
    finished_at: datetime | None


_STATE = (
    "job_id, tenant_id, capture_id, kind, status, attempts, runs, run_failures, error_code,"
    " last_error, claim_owner, next_attempt_at, finished_at"
)


def get(tx: Transaction, job_id: uuid.UUID, lock: bool = False) -> JobState | None:
    row = tx.execute(
        f"SELECT {_STATE} FROM intake_job WHERE job_id = %s" + (" FOR UPDATE" if lock else ""),
        (job_id,),
    ).fetchone()
    return JobState(*row) if row else None


def clock(tx: Transaction) -> datetime:
    """The database clock every due time is measured against."""
    row = tx.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


# Intake: new jobs and their enqueue ---------------------------------------------------


def insert_pending(
    tx: Transaction,
    job_id: uuid.UUID,
    tenant_id: str,
    capture_id: uuid.UUID,
    kind: str,
    due_in_seconds: float = 0.0,
    trace_context: str | None = None,
) -> bool:
    """A new job of ``kind`` on the capture, ``pending``; the sweeper may take it once
    ``due_in_seconds`` have passed (for a new capture: time for the API's own enqueue
    after commit). ``trace_context``: the accepting request's W3C ``traceparent``,
    which the worker's run continues. False when the capture already has a job of
    that kind."""
    row = tx.execute(
        "INSERT INTO intake_job (job_id, tenant_id, capture_id, kind, status, attempts,"
        " next_attempt_at, trace_context) VALUES (%s, %s, %s, %s, 'pending', 0,"
        " clock_timestamp() + make_interval(secs => %s), %s)"
        " ON CONFLICT DO NOTHING RETURNING 1",
        (job_id, tenant_id, capture_id, kind, due_in_seconds, trace_context),
    ).fetchone()
    return row is not None


def mark_enqueued(tx: Transaction, job_ids: list[uuid.UUID], count_attempt: bool = False) -> int:
    """pending → enqueued for jobs the topic confirmed; a job already past pending is
    left as it is. ``count_attempt``: the attempt was not counted yet (the sweeper
    counts its attempts when it claims). Returns how many moved."""
    cur = tx.execute(
        "UPDATE intake_job SET status = 'enqueued', enqueued_at = clock_timestamp(),"
        " attempts = attempts + %s, last_error = NULL"
        " WHERE job_id = ANY(%s) AND status = 'pending'",
        (1 if count_attempt else 0, job_ids),
    )
    return cur.rowcount


def record_enqueue_attempt(
    tx: Transaction, job_id: uuid.UUID, retry_in_seconds: float, error: str | None
) -> None:
    """Count an enqueue attempt of a pending job and set when it is next due."""
    tx.execute(
        "UPDATE intake_job SET attempts = attempts + 1, last_error = coalesce(%s, last_error),"
        " next_attempt_at = clock_timestamp() + make_interval(secs => %s)"
        " WHERE job_id = %s AND status = 'pending'",
        (error, retry_in_seconds, job_id),
    )


def record_enqueue_error(tx: Transaction, job_id: uuid.UUID, error: str) -> None:
    tx.execute(
        "UPDATE intake_job SET last_error = %s WHERE job_id = %s AND status = 'pending'",
        (error, job_id),
    )


def due_pending(
    tx: Transaction,
    as_of: datetime,
    after: tuple[datetime, uuid.UUID] | None,
    limit: int,
) -> list[JobState]:
    """A page of pending jobs due at ``as_of``, in (next_attempt_at, job_id) order after
    the cursor ``after``, locked FOR UPDATE SKIP LOCKED: two sweepers take disjoint
    pages instead of waiting for each other, and the lock lasts only until the caller
    commits the claim (never across the enqueue)."""
    cursor_clause = "AND (next_attempt_at, job_id) > (%s, %s)" if after else ""
    params: tuple[Any, ...] = (as_of, *after, limit) if after else (as_of, limit)
    rows = tx.execute(
        f"SELECT {_STATE} FROM intake_job WHERE status = 'pending' AND next_attempt_at <= %s"
        f" {cursor_clause} ORDER BY next_attempt_at, job_id LIMIT %s FOR UPDATE SKIP LOCKED",
        params,
    ).fetchall()
    return [JobState(*r) for r in rows]


def claim_for_enqueue(tx: Transaction, delays: dict[uuid.UUID, float]) -> None:
    """The sweeper's claim: count one attempt per job and push each ``next_attempt_at``
    out by its delay, so no other sweeper takes the job while this one enqueues it.
    The job stays ``pending``; the claim ends when the delay has passed."""
    if not delays:
        return
    tx.execute(
        "UPDATE intake_job j SET attempts = j.attempts + 1,"
        " next_attempt_at = clock_timestamp() + make_interval(secs => d.delay)"
        " FROM unnest(%b::uuid[], %b::float8[]) AS d(job_id, delay)"
        " WHERE j.job_id = d.job_id AND j.status = 'pending'",
        (list(delays), list(delays.values())),
    )


@dataclass(frozen=True, slots=True)
class JobBacklog:
    status: str
    jobs: int
    oldest_age_seconds: float
    failing: int  # jobs that have a last_error


def job_backlog(tx: Transaction) -> list[JobBacklog]:
    """Per status: how many jobs, the age of the oldest, and how many carry an error."""
    rows = tx.execute(
        "SELECT status, count(*),"
        " coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)::float8,"
        " count(*) FILTER (WHERE last_error IS NOT NULL)"
        " FROM intake_job GROUP BY status ORDER BY status"
    ).fetchall()
    return [JobBacklog(str(r[0]), int(r[1]), float(r[2]), int(r[3])) for r in rows]


# The capture worker: claims, renewals, the end of a run, the repair scan -------------


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A job under this worker's claim, with the capture it is about."""

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
    trace_context: str | None = None  # the accepting request's W3C traceparent, if traced


def claim(
    tx: Transaction, job_id: uuid.UUID, kinds: Sequence[str], owner: str, claim_seconds: float
) -> ClaimedJob | None:
    """Claim the job for ``owner`` for ``claim_seconds`` if it is claimable now and of
    one of ``kinds`` (LIKE patterns); None otherwise.

    The UPDATE is the compare-and-set: of two workers claiming the same job, the
    second waits for the first's row lock, re-reads the row (now ``running`` under a
    live claim) and matches nothing.
    """
    row = tx.execute(
        "WITH claimed AS ("
        " UPDATE intake_job SET status = 'running', claim_owner = %s,"
        " claim_expires_at = clock_timestamp() + make_interval(secs => %s), runs = runs + 1"
        f" WHERE job_id = %s AND kind LIKE ANY(%s) AND {_CLAIMABLE}"
        " RETURNING job_id, tenant_id, kind, runs, run_failures, capture_id, trace_context)"
        " SELECT j.job_id, j.tenant_id, j.kind, j.runs, j.run_failures, c.capture_id, c.source,"
        " c.instance_id, c.schema_version, c.source_url, c.captured_at, c.created_at,"
        " c.content_type, c.content_sha256, c.size_bytes, c.evidence_key, j.trace_context"
        " FROM claimed j JOIN capture c"
        " ON c.tenant_id = j.tenant_id AND c.capture_id = j.capture_id",
        (owner, claim_seconds, job_id, list(kinds)),
    ).fetchone()
    return ClaimedJob(*row) if row else None


def renew(tx: Transaction, job_id: uuid.UUID, owner: str, claim_seconds: float) -> bool:
    """Extend this worker's claim; False when it has lost the job (the claim ran out
    and another worker claimed it, or an operator acted on it)."""
    row = tx.execute(
        "UPDATE intake_job SET claim_expires_at = clock_timestamp() + make_interval(secs => %s)"
        " WHERE job_id = %s AND status = 'running' AND claim_owner = %s RETURNING 1",
        (claim_seconds, job_id, owner),
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
    claim was lost.
    ``count_failure`` counts a job-level failure against the job's retry budget."""
    if status not in ("done", "failed", "retrying"):
        raise ValueError(f"a run cannot end as {status!r}")
    row = tx.execute(
        "UPDATE intake_job SET status = %s, claim_owner = NULL, claim_expires_at = NULL,"
        " next_attempt_at = coalesce(%s::timestamptz,"
        " clock_timestamp() + make_interval(secs => %s::float8), next_attempt_at),"
        " error_code = %s, last_error = %s, run_failures = run_failures + %s,"
        " finished_at = CASE WHEN %s IN ('done', 'failed') THEN clock_timestamp() END"
        " WHERE job_id = %s AND status = 'running' AND claim_owner = %s RETURNING 1",
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
    retries that are due, runs whose claim expired, and enqueued jobs no worker has
    taken for ``orphaned_after_seconds`` (their message was lost or is late)."""
    rows = tx.execute(
        "SELECT job_id FROM intake_job"
        " WHERE status IN ('enqueued', 'running', 'retrying') AND kind LIKE ANY(%s)"
        " AND job_id > %s AND ("
        " (status = 'retrying' AND next_attempt_at <= clock_timestamp())"
        " OR (status = 'running' AND claim_expires_at <= clock_timestamp())"
        " OR (status = 'enqueued' AND coalesce(enqueued_at, created_at)"
        "     <= clock_timestamp() - make_interval(secs => %s)))"
        " ORDER BY job_id LIMIT %s",
        (list(kinds), after or uuid.UUID(int=0), orphaned_after_seconds, limit),
    ).fetchall()
    return [r[0] for r in rows]


# Operators' repairs ----------------------------------------------------------------


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


def lock_of_capture(tx: Transaction, tenant_id: str, capture_id: uuid.UUID) -> list[JobState]:
    """Every job of a capture, locked FOR UPDATE: a repair or a worker's claim of one
    waits until the caller's transaction ends (and then finds it gone, or as it was)."""
    rows = tx.execute(
        f"SELECT {_STATE} FROM intake_job WHERE tenant_id = %s AND capture_id = %s"
        " ORDER BY job_id FOR UPDATE",
        (tenant_id, capture_id),
    ).fetchall()
    return [JobState(*r) for r in rows]


def delete_repairs(tx: Transaction, tenant_id: str, job_ids: list[uuid.UUID]) -> int:
    """Delete the repair records of these jobs (the evidence sweep, before the items
    and jobs they name); returns the count."""
    return tx.execute(
        "DELETE FROM capture_repair WHERE tenant_id = %s AND job_id = ANY(%s)",
        (tenant_id, job_ids),
    ).rowcount


def delete_of_capture(tx: Transaction, tenant_id: str, capture_id: uuid.UUID) -> int:
    """Delete a capture's jobs (the evidence sweep's step; the caller has deleted what
    references them first); returns the count."""
    return tx.execute(
        "DELETE FROM intake_job WHERE tenant_id = %s AND capture_id = %s",
        (tenant_id, capture_id),
    ).rowcount
