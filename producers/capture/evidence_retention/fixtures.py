"""Regression fixtures that pin a capture: while pinned, the capture, its derived
rows and its artifact are kept whatever their age."""

from __future__ import annotations

import uuid

import psycopg

from db.resolver import evidence as sql
from db.unit_of_work import Transaction
from producers.capture.exceptions import CaptureNotFound, ReasonRequired


def pin(
    conn: psycopg.Connection,
    tenant_id: str,
    capture_id: uuid.UUID,
    fixture: str,
    by: str,
    reason: str,
) -> bool:
    """Pin the capture for ``fixture``; False when that pin existed already."""
    if not fixture.strip() or not reason.strip():
        raise ReasonRequired("a fixture pin needs the fixture's name and a reason")
    try:
        with conn.transaction():
            return sql.pin(Transaction(conn), tenant_id, capture_id, fixture, by, reason)
    except psycopg.errors.ForeignKeyViolation as exc:
        raise CaptureNotFound(f"no capture {capture_id} of tenant {tenant_id!r}") from exc


def unpin(conn: psycopg.Connection, tenant_id: str, capture_id: uuid.UUID, fixture: str) -> bool:
    """Drop the pin; False when there was none. The capture then ages as any other."""
    with conn.transaction():
        return sql.unpin(Transaction(conn), tenant_id, capture_id, fixture)
