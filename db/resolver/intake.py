"""Capture intake SQL: collector credentials, captures and receipts.

The intake jobs are ``db.repositories.capture_jobs``'s, the one module that writes
``intake_job``; a receipt only reads its job's id. Every function runs inside the
caller's transaction (or, on an autocommit connection, as its own statement);
``producers.capture.intake`` decides where transactions begin and end.
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
