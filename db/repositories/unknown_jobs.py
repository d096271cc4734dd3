"""Jobs the capture worker was asked to run that the resolver database does not hold
(``unknown_job_message``): recorded, never dropped in silence.

A job message names a job row; after a restore from a backup taken before the
capture was accepted (or once the capture expired and was swept), the row is gone
and there is nothing to run. The worker records each such job here with a stable
code, so an operator sees which tenant's captures must be posted again. Every
function runs in the caller's transaction; times come from the database clock.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from db.unit_of_work import Transaction


@dataclass(frozen=True, slots=True)
class UnknownJob:
    job_id: uuid.UUID
    tenant_id: str
    capture_id: uuid.UUID
    kind: str
    found_by: str
    error_code: str
    first_seen_at: datetime
    last_seen_at: datetime
    times_seen: int


_COLUMNS = (
    "job_id, tenant_id, capture_id, kind, found_by, error_code, first_seen_at, last_seen_at,"
    " times_seen"
)


def record(
    tx: Transaction,
    job_id: uuid.UUID,
    tenant_id: str,
    capture_id: uuid.UUID,
    kind: str,
    found_by: str,
    error_code: str,
) -> UnknownJob:
    """Record the job as unknown, or count one more meeting with it (the first
    sighting's identity and time are kept)."""
    row = tx.execute(
        "INSERT INTO unknown_job_message (job_id, tenant_id, capture_id, kind, found_by,"
        " error_code) VALUES (%s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (job_id) DO UPDATE SET last_seen_at = clock_timestamp(),"
        " times_seen = unknown_job_message.times_seen + 1"
        f" RETURNING {_COLUMNS}",
        (job_id, tenant_id, capture_id, kind, found_by, error_code),
    ).fetchone()
    assert row is not None
    return UnknownJob(*row)


def listed(tx: Transaction, tenant_id: str | None = None, limit: int = 1000) -> list[UnknownJob]:
    """The unknown jobs, newest sighting first (of one tenant, or of all)."""
    rows = tx.execute(
        f"SELECT {_COLUMNS} FROM unknown_job_message"
        " WHERE %s::text IS NULL OR tenant_id = %s ORDER BY last_seen_at DESC, job_id LIMIT %s",
        (tenant_id, tenant_id, limit),
    ).fetchall()
    return [UnknownJob(*r) for r in rows]
