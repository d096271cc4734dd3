"""Capture intake SQL: collector credentials, captures, receipts and intake jobs.

Every function runs inside the caller's transaction (or, on an autocommit
connection, as its own statement); ``producers.capture.intake`` decides where transactions
begin and end. Times come from the database clock, so the API and every sweeper
agree on when a job is due.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

# Credentials ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CredentialRow:
    client_id: str
    tenant_id: str
    source: str
    instance_id: str
    created_at: datetime
    revoked_at: datetime | None


_CREDENTIAL = "client_id, tenant_id, source, instance_id, created_at, revoked_at"


def _credential(row: tuple[Any, ...]) -> CredentialRow:
    return CredentialRow(*row)


def find_credential(conn: psycopg.Connection, client_id: str) -> CredentialRow | None:
    row = conn.execute(
        f"SELECT {_CREDENTIAL} FROM collector_credential WHERE client_id = %s", (client_id,)
    ).fetchone()
    return _credential(row) if row else None


def insert_credential(
    conn: psycopg.Connection, client_id: str, tenant_id: str, source: str, instance_id: str
) -> CredentialRow:
    """Create the instance if new and map ``client_id`` to it; returns the stored row,
    which is the earlier one if ``client_id`` was already registered (the caller
    compares)."""
    conn.execute(
        "INSERT INTO collector_instance (tenant_id, source, instance_id) VALUES (%s, %s, %s)"
        " ON CONFLICT DO NOTHING",
        (tenant_id, source, instance_id),
    )
    conn.execute(
        "INSERT INTO collector_credential (client_id, tenant_id, source, instance_id)"
        " VALUES (%s, %s, %s, %s) ON CONFLICT (client_id) DO NOTHING",
        (client_id, tenant_id, source, instance_id),
    )
    found = find_credential(conn, client_id)
    assert found is not None
    return found


def revoke_credential(conn: psycopg.Connection, client_id: str) -> CredentialRow | None:
    """Revoke (idempotent: the first revocation time is kept)."""
    row = conn.execute(
        "UPDATE collector_credential SET revoked_at = coalesce(revoked_at, clock_timestamp())"
        f" WHERE client_id = %s RETURNING {_CREDENTIAL}",
        (client_id,),
    ).fetchone()
    return _credential(row) if row else None


def list_credentials(
    conn: psycopg.Connection, tenant_id: str | None = None, after: str = "", limit: int = 1000
) -> list[CredentialRow]:
    """Credentials in client_id order after ``after`` (a page of at most ``limit``)."""
    rows = conn.execute(
        f"SELECT {_CREDENTIAL} FROM collector_credential"
        " WHERE client_id > %s AND (%s::text IS NULL OR tenant_id = %s)"
        " ORDER BY client_id LIMIT %s",
        (after, tenant_id, tenant_id, limit),
    ).fetchall()
    return [_credential(r) for r in rows]


# Captures and receipts --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewCapture:
    tenant_id: str
    capture_id: uuid.UUID
    source: str
    instance_id: str
    schema_version: int
    source_url: str
    captured_at: datetime
    content_type: str
    content_sha256: str
    size_bytes: int
    evidence_key: str


@dataclass(frozen=True, slots=True)
class ReceiptRow:
    receipt_id: uuid.UUID
    tenant_id: str
    source: str
    instance_id: str
    idempotency_key: str
    request_fingerprint: str
    capture_id: uuid.UUID
    created_at: datetime
    schema_version: int
    source_url: str
    captured_at: datetime
    content_type: str
    content_sha256: str
    size_bytes: int
    evidence_key: str
    job_id: uuid.UUID | None


_RECEIPT = (
    "SELECT r.receipt_id, r.tenant_id, r.source, r.instance_id, r.idempotency_key,"
    " r.request_fingerprint, r.capture_id, r.created_at, c.schema_version, c.source_url,"
    " c.captured_at, c.content_type, c.content_sha256, c.size_bytes, c.evidence_key,"
    " j.job_id"
    " FROM receipt r"
    " JOIN capture c ON c.tenant_id = r.tenant_id AND c.capture_id = r.capture_id"
    " LEFT JOIN intake_job j ON j.tenant_id = r.tenant_id AND j.capture_id = r.capture_id"
    " AND j.kind = %s"
)


def find_receipt(conn: psycopg.Connection, kind: str, receipt_id: uuid.UUID) -> ReceiptRow | None:
    row = conn.execute(_RECEIPT + " WHERE r.receipt_id = %s", (kind, receipt_id)).fetchone()
    return ReceiptRow(*row) if row else None


def find_receipt_by_key(
    conn: psycopg.Connection,
    kind: str,
    tenant_id: str,
    source: str,
    instance_id: str,
    idempotency_key: str,
) -> ReceiptRow | None:
    row = conn.execute(
        _RECEIPT + " WHERE r.tenant_id = %s AND r.source = %s AND r.instance_id = %s"
        " AND r.idempotency_key = %s",
        (kind, tenant_id, source, instance_id, idempotency_key),
    ).fetchone()
    return ReceiptRow(*row) if row else None


def insert_capture(conn: psycopg.Connection, capture: NewCapture) -> bool:
    """Insert the capture; False when a capture with its id already exists.

    A concurrent insert of the same id waits on the primary key until the other
    transaction ends, then either inserts (the other rolled back) or does nothing.
    """
    c = capture
    row = conn.execute(
        "INSERT INTO capture (tenant_id, capture_id, source, instance_id, schema_version,"
        " source_url, captured_at, content_type, content_sha256, size_bytes, evidence_key)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (tenant_id, capture_id) DO NOTHING RETURNING capture_id",
        (
            c.tenant_id,
            c.capture_id,
            c.source,
            c.instance_id,
            c.schema_version,
            c.source_url,
            c.captured_at,
            c.content_type,
            c.content_sha256,
            c.size_bytes,
            c.evidence_key,
        ),
    ).fetchone()
    return row is not None


def insert_receipt(
    conn: psycopg.Connection,
    receipt_id: uuid.UUID,
    capture: NewCapture,
    idempotency_key: str,
    request_fingerprint: str,
) -> None:
    conn.execute(
        "INSERT INTO receipt (receipt_id, tenant_id, source, instance_id, idempotency_key,"
        " request_fingerprint, capture_id) VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (
            receipt_id,
            capture.tenant_id,
            capture.source,
            capture.instance_id,
            idempotency_key,
            request_fingerprint,
            capture.capture_id,
        ),
    )


def insert_job(
    conn: psycopg.Connection,
    job_id: uuid.UUID,
    tenant_id: str,
    capture_id: uuid.UUID,
    kind: str,
    sweep_after_seconds: float,
) -> None:
    """A pending job the sweeper may pick up once ``sweep_after_seconds`` have passed
    (time for the API's own enqueue after commit)."""
    conn.execute(
        "INSERT INTO intake_job (job_id, tenant_id, capture_id, kind, status, attempts,"
        " next_attempt_at) VALUES (%s, %s, %s, %s, 'pending', 0,"
        " clock_timestamp() + make_interval(secs => %s))",
        (job_id, tenant_id, capture_id, kind, sweep_after_seconds),
    )


# Jobs --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobRow:
    job_id: uuid.UUID
    tenant_id: str
    capture_id: uuid.UUID
    kind: str
    status: str
    attempts: int
    next_attempt_at: datetime
    last_error: str | None


_JOB = "job_id, tenant_id, capture_id, kind, status, attempts, next_attempt_at, last_error"


def find_job(conn: psycopg.Connection, job_id: uuid.UUID) -> JobRow | None:
    row = conn.execute(f"SELECT {_JOB} FROM intake_job WHERE job_id = %s", (job_id,)).fetchone()
    return JobRow(*row) if row else None


def mark_enqueued(
    conn: psycopg.Connection, job_ids: list[uuid.UUID], count_attempt: bool = False
) -> int:
    """pending → enqueued for jobs the topic confirmed; a job already past pending is
    left as it is. ``count_attempt``: the attempt was not counted yet (the sweeper
    counts its attempts when it claims). Returns how many moved."""
    cur = conn.execute(
        "UPDATE intake_job SET status = 'enqueued', enqueued_at = clock_timestamp(),"
        " attempts = attempts + %s, last_error = NULL"
        " WHERE job_id = ANY(%s) AND status = 'pending'",
        (1 if count_attempt else 0, job_ids),
    )
    return cur.rowcount


def record_enqueue_attempt(
    conn: psycopg.Connection, job_id: uuid.UUID, retry_in_seconds: float, error: str | None
) -> None:
    """Count an enqueue attempt of a pending job and set when it is next due."""
    conn.execute(
        "UPDATE intake_job SET attempts = attempts + 1, last_error = coalesce(%s, last_error),"
        " next_attempt_at = clock_timestamp() + make_interval(secs => %s)"
        " WHERE job_id = %s AND status = 'pending'",
        (error, retry_in_seconds, job_id),
    )


def record_enqueue_error(conn: psycopg.Connection, job_id: uuid.UUID, error: str) -> None:
    conn.execute(
        "UPDATE intake_job SET last_error = %s WHERE job_id = %s AND status = 'pending'",
        (error, job_id),
    )


def due_jobs(
    conn: psycopg.Connection,
    as_of: datetime,
    after: tuple[datetime, uuid.UUID] | None,
    limit: int,
) -> list[JobRow]:
    """A page of pending jobs due at ``as_of``, in (next_attempt_at, job_id) order after
    the cursor ``after``, locked FOR UPDATE SKIP LOCKED: two sweepers take disjoint
    pages instead of waiting for each other, and the lock lasts only until the caller
    commits the claim (never across the enqueue)."""
    cursor_clause = "AND (next_attempt_at, job_id) > (%s, %s)" if after else ""
    params: tuple[Any, ...] = (as_of, *after, limit) if after else (as_of, limit)
    rows = conn.execute(
        f"SELECT {_JOB} FROM intake_job WHERE status = 'pending' AND next_attempt_at <= %s"
        f" {cursor_clause} ORDER BY next_attempt_at, job_id LIMIT %s FOR UPDATE SKIP LOCKED",
        params,
    ).fetchall()
    return [JobRow(*r) for r in rows]


def claim_jobs(conn: psycopg.Connection, delays: dict[uuid.UUID, float]) -> None:
    """Count one attempt per job and push each ``next_attempt_at`` out by its delay,
    so no other sweeper takes the job while this one enqueues it."""
    if not delays:
        return
    conn.execute(
        "UPDATE intake_job j SET attempts = j.attempts + 1,"
        " next_attempt_at = clock_timestamp() + make_interval(secs => d.delay)"
        " FROM unnest(%s::uuid[], %s::float8[]) AS d(job_id, delay)"
        " WHERE j.job_id = d.job_id AND j.status = 'pending'",
        (list(delays), list(delays.values())),
    )


def clock(conn: psycopg.Connection) -> datetime:
    row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class JobBacklog:
    status: str
    jobs: int
    oldest_age_seconds: float
    failing: int  # jobs that have a last_error


def job_backlog(conn: psycopg.Connection) -> list[JobBacklog]:
    """Per status: how many jobs, the age of the oldest, and how many carry an error."""
    rows = conn.execute(
        "SELECT status, count(*),"
        " coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)::float8,"
        " count(*) FILTER (WHERE last_error IS NOT NULL)"
        " FROM intake_job GROUP BY status ORDER BY status"
    ).fetchall()
    return [JobBacklog(str(r[0]), int(r[1]), float(r[2]), int(r[3])) for r in rows]
