"""The operations console's sessions and audit, in the control database.

A session row is found by the SHA-256 of the session id; the id itself is only in
the person's cookie, so the table (or a backup of it) cannot be used to act as
anyone. It keeps the token's hash (the same hash ``GAPLESS_API_TOKENS`` lists, not a
secret) and the grant the token had at login, for the record. The audit has one row
per action taken through the console, whatever its outcome: an action that passed
its checks is recorded ``started`` before it acts (``record_action``) and completed
once, after (``finish_action``), so one the console died in stays ``started``.
Every function runs in the caller's connection (the console's are autocommit: each
statement is its own transaction).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import psycopg

Outcome = Literal["started", "done", "refused", "failed"]


@dataclass(frozen=True, slots=True)
class SessionRow:
    person: str
    token_hash: str
    scope: str
    created_at: datetime
    expires_at: datetime


def insert_session(
    conn: psycopg.Connection,
    session_hash: str,
    person: str,
    token_hash: str,
    scope: str,
    ttl_seconds: float,
) -> SessionRow:
    """Record a new session that lasts ``ttl_seconds`` by the database clock."""
    row = conn.execute(
        "INSERT INTO console_session (session_hash, person, token_hash, scope, expires_at)"
        " VALUES (%s, %s, %s, %s, clock_timestamp() + make_interval(secs => %s))"
        " RETURNING person, token_hash, scope, created_at, expires_at",
        (session_hash, person, token_hash, scope, ttl_seconds),
    ).fetchone()
    assert row is not None
    return SessionRow(*row)


def live_session(conn: psycopg.Connection, session_hash: str) -> SessionRow | None:
    """The session, unless it is unknown, logged out or expired."""
    row = conn.execute(
        "SELECT person, token_hash, scope, created_at, expires_at FROM console_session"
        " WHERE session_hash = %s AND ended_at IS NULL AND expires_at > clock_timestamp()",
        (session_hash,),
    ).fetchone()
    return None if row is None else SessionRow(*row)


def end_session(conn: psycopg.Connection, session_hash: str) -> bool:
    """Log the session out; False when it was not live."""
    ended = conn.execute(
        "UPDATE console_session SET ended_at = clock_timestamp()"
        " WHERE session_hash = %s AND ended_at IS NULL",
        (session_hash,),
    )
    return ended.rowcount > 0


def delete_old_sessions(conn: psycopg.Connection, older_than_s: float, limit: int = 1000) -> int:
    """Delete up to ``limit`` sessions that expired (or ended) ``older_than_s`` ago."""
    deleted = conn.execute(
        "DELETE FROM console_session WHERE session_hash IN (SELECT session_hash"
        " FROM console_session WHERE coalesce(ended_at, expires_at)"
        " < clock_timestamp() - make_interval(secs => %s) LIMIT %s)",
        (older_than_s, limit),
    )
    return deleted.rowcount


@dataclass(frozen=True, slots=True)
class AuditRecord:
    id: int
    at: datetime
    person: str
    token_id: str
    action: str
    target: str
    tenant_id: str | None
    reason: str
    outcome: Outcome
    code: str | None
    detail: str
    ended_at: datetime | None = None


_AUDIT_COLUMNS = (
    "id, at, person, token_id, action, target, tenant_id, reason, outcome, code, detail, ended_at"
)


def record_action(
    conn: psycopg.Connection,
    *,
    person: str,
    token_id: str,
    action: str,
    target: str,
    tenant_id: str | None,
    reason: str,
    outcome: Outcome,
    code: str | None = None,
    detail: str = "",
) -> int:
    """Append one audit record (``started``: the action is about to act); its id."""
    row = conn.execute(
        "INSERT INTO console_audit (person, token_id, action, target, tenant_id, reason,"
        " outcome, code, detail) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
        (person, token_id, action, target, tenant_id, reason, outcome, code, detail),
    ).fetchone()
    assert row is not None
    return int(row[0])


def finish_action(
    conn: psycopg.Connection,
    record_id: int,
    *,
    target: str,
    tenant_id: str | None,
    reason: str,
    outcome: Outcome,
    code: str | None,
    detail: str,
) -> bool:
    """Complete a ``started`` record with the action's outcome (and its target, tenant
    and reason as the action finally named them: a form's reason is read once the
    action is under way); False if it was not ``started`` (a record is completed
    once)."""
    cur = conn.execute(
        "UPDATE console_audit SET target = %s, tenant_id = %s, reason = %s, outcome = %s,"
        " code = %s, detail = %s, ended_at = clock_timestamp()"
        " WHERE id = %s AND outcome = 'started'",
        (target, tenant_id, reason, outcome, code, detail, record_id),
    )
    return cur.rowcount == 1


def audit_page(
    conn: psycopg.Connection,
    tenants: frozenset[str] | None,
    token_id: str,
    before: int | None,
    limit: int,
) -> tuple[list[AuditRecord], bool]:
    """Up to ``limit`` records, newest first, older than the record ``before`` (None:
    from the newest), and whether older ones follow. ``tenants`` None: every record;
    else those about one of ``tenants`` and those of the token ``token_id`` (a record
    about no tenant, a login say, is for those who may see every tenant, and for its
    own token)."""
    rows = conn.execute(
        f"SELECT {_AUDIT_COLUMNS} FROM console_audit"
        " WHERE (%(all)s OR tenant_id = ANY(%(tenants)s) OR token_id = %(token)s)"
        " AND (%(before)s::bigint IS NULL OR id < %(before)s::bigint)"
        " ORDER BY id DESC LIMIT %(limit)s",
        {
            "all": tenants is None,
            "tenants": sorted(tenants or ()),
            "token": token_id,
            "before": before,
            "limit": limit + 1,
        },
    ).fetchall()
    return [AuditRecord(*r) for r in rows[:limit]], len(rows) > limit


def audit_record(conn: psycopg.Connection, record_id: int) -> AuditRecord | None:
    row = conn.execute(
        f"SELECT {_AUDIT_COLUMNS} FROM console_audit WHERE id = %s", (record_id,)
    ).fetchone()
    return None if row is None else AuditRecord(*row)
