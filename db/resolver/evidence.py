"""Evidence retention SQL: what keeps a capture, deleting an expired capture with the
rows derived from it, the deletion audit, the missing-artifact flags, regression
fixture pins, and the per-artifact lock intake and the sweep share.

A capture's jobs and checkpoints are deleted through their owners
(``db.repositories.capture_jobs``, ``producers.capture.worker.checkpoints``); every
other statement is here. Functions run in the caller's transaction (or, on an
autocommit connection, as their own statement); ``producers.capture.evidence_retention``
decides where transactions begin and end.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from db.unit_of_work import Transaction

# The two-integer advisory-lock namespace of artifact keys ("evid"), apart from the
# worker's read slots and the single-bigint locks of the relay and the writers.
KEY_LOCK_NAMESPACE = 0x65766964

KEPT_REASONS = (
    "within window",
    "unfinished work",
    "decision",
    "open review case",
    "regression fixture",
)

# Why capture ``c`` is kept, the first reason that holds, or NULL when nothing keeps
# it. ``%(window)s`` is the retention window in seconds. Accepted facts all name a
# decision (INV-05) and decisions cite their evidence, so "decision" covers both; a
# product the worker applied names its decision too. "unfinished work": a job not
# done or skipped (a failed one waits on an operator) or one that finished within
# the window, or a product waiting on a retry or an operator.
_KEPT_REASON = """CASE
  WHEN c.created_at > clock_timestamp() - make_interval(secs => %(window)s)
    THEN 'within window'
  WHEN EXISTS (SELECT 1 FROM intake_job j
      WHERE j.tenant_id = c.tenant_id AND j.capture_id = c.capture_id
        AND (j.status NOT IN ('done', 'skipped')
             OR j.finished_at > clock_timestamp() - make_interval(secs => %(window)s)))
    OR EXISTS (SELECT 1 FROM capture_item i
      WHERE i.tenant_id = c.tenant_id AND i.capture_id = c.capture_id
        AND i.outcome IN ('retryable', 'failed'))
    THEN 'unfinished work'
  WHEN EXISTS (SELECT 1 FROM decision d
      WHERE d.tenant_id = c.tenant_id
        AND d.evidence @> jsonb_build_array(jsonb_build_object('capture_id', c.capture_id::text)))
    OR EXISTS (SELECT 1 FROM capture_item i
      WHERE i.tenant_id = c.tenant_id AND i.capture_id = c.capture_id
        AND i.decision_id IS NOT NULL)
    THEN 'decision'
  WHEN EXISTS (SELECT 1 FROM capture_item i JOIN review_case r
        ON r.tenant_id = i.tenant_id AND r.catalog_id = i.catalog_id AND r.case_id = i.case_id
      WHERE i.tenant_id = c.tenant_id AND i.capture_id = c.capture_id AND r.status = 'open')
    THEN 'open review case'
  WHEN EXISTS (SELECT 1 FROM evidence_fixture f
      WHERE f.tenant_id = c.tenant_id AND f.capture_id = c.capture_id)
    THEN 'regression fixture'
END"""


@dataclass(frozen=True, slots=True)
class CaptureRef:
    tenant_id: str
    capture_id: uuid.UUID
    evidence_key: str
    created_at: datetime


def lock_key(tx: Transaction, evidence_key: str, shared: bool = False) -> None:
    """Take the artifact's lock for this transaction. Exclusive: the sweep, while it
    decides whether an object may go and deletes it. Shared: an intake, while it
    commits a capture naming the object."""
    digest = hashlib.sha256(evidence_key.encode()).digest()
    key = int.from_bytes(digest[:4], "big", signed=True)
    function = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    tx.execute(f"SELECT {function}(%s, %s)", (KEY_LOCK_NAMESPACE, key))


def expiring_captures(
    tx: Transaction,
    window_seconds: float,
    after: tuple[datetime, str, uuid.UUID] | None,
    limit: int,
) -> list[CaptureRef]:
    """Captures nothing keeps, oldest first, after the keyset ``after``."""
    cursor = "AND (c.created_at, c.tenant_id, c.capture_id) > (%(t)s, %(tenant)s, %(id)s)"
    rows = tx.execute(
        "SELECT c.tenant_id, c.capture_id, c.evidence_key, c.created_at FROM capture c"
        " WHERE c.created_at <= clock_timestamp() - make_interval(secs => %(window)s)"
        f" {cursor if after else ''} AND ({_KEPT_REASON}) IS NULL"
        " ORDER BY c.created_at, c.tenant_id, c.capture_id LIMIT %(limit)s",
        {
            "window": window_seconds,
            "limit": limit,
            **({"t": after[0], "tenant": after[1], "id": after[2]} if after else {}),
        },
    ).fetchall()
    return [CaptureRef(*r) for r in rows]


def kept_counts(tx: Transaction, window_seconds: float) -> dict[str, int]:
    """How many captures each reason keeps (the first reason that holds)."""
    rows = tx.execute(
        f"SELECT reason, count(*) FROM (SELECT {_KEPT_REASON} AS reason FROM capture c) k"
        " WHERE reason IS NOT NULL GROUP BY reason",
        {"window": window_seconds},
    ).fetchall()
    return {str(r): int(n) for r, n in rows}


def hold_cited(tx: Transaction, tenant_id: str, capture_ids: list[uuid.UUID]) -> list[uuid.UUID]:
    """Share-lock (``FOR KEY SHARE``) the cited captures of a decision being recorded,
    so a sweep's ``lock_capture`` waits for the decision's transaction and then sees
    the decision among the references. Returns the cited captures that existed when
    this began but were deleted before the lock was granted (a sweep that committed
    first): the decision must not be recorded on them."""
    if not capture_ids:
        return []
    if tx.unlocked:
        # With the unit's write: every cited capture held, or it is redone under the
        # lock, where this finds which are gone. (One never stored also redoes it.)
        tx.defer_expected(
            "SELECT capture_id FROM capture WHERE tenant_id = %(t)s"
            " AND capture_id = ANY(%(ids)s) FOR KEY SHARE",
            {"t": tenant_id, "ids": capture_ids},
            len(capture_ids),
            "the cited captures",
        )
        return []
    # One statement: ``present`` reads the statement's snapshot; the locking scan of
    # ``held`` waits for a sweep holding a row and skips one it deleted meanwhile.
    rows = tx.execute(
        "WITH present AS (SELECT capture_id FROM capture"
        " WHERE tenant_id = %(t)s AND capture_id = ANY(%(ids)s)),"
        " held AS (SELECT capture_id FROM capture"
        " WHERE tenant_id = %(t)s AND capture_id = ANY(%(ids)s) FOR KEY SHARE)"
        " SELECT capture_id FROM present EXCEPT SELECT capture_id FROM held",
        {"t": tenant_id, "ids": capture_ids},
    ).fetchall()
    return sorted(r[0] for r in rows)


def lock_capture(tx: Transaction, tenant_id: str, capture_id: uuid.UUID) -> str | None:
    """Lock the capture row FOR UPDATE; its artifact key, or None if it is gone. Every
    row that references a capture checks its key with a KEY SHARE lock, so a new job,
    pin or product of this capture waits until the caller's transaction ends."""
    row = tx.execute(
        "SELECT evidence_key FROM capture WHERE tenant_id = %s AND capture_id = %s FOR UPDATE",
        (tenant_id, capture_id),
    ).fetchone()
    return str(row[0]) if row else None


def kept_reason(
    tx: Transaction, tenant_id: str, capture_id: uuid.UUID, window_seconds: float
) -> str | None:
    """Why this capture is kept now (a statement of its own: it sees every commit
    made before the caller's locks were granted), or None."""
    row = tx.execute(
        f"SELECT {_KEPT_REASON} FROM capture c"
        " WHERE c.tenant_id = %(tenant)s AND c.capture_id = %(id)s",
        {"window": window_seconds, "tenant": tenant_id, "id": capture_id},
    ).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def delete_capture_rows(tx: Transaction, tenant_id: str, capture_id: uuid.UUID) -> dict[str, int]:
    """Delete a capture's products (their claims with them), identity pins and
    receipts (after the repairs and checkpoints that reference them, before the jobs
    and the capture)."""
    key = (tenant_id, capture_id)
    where = "WHERE tenant_id = %s AND capture_id = %s"
    return {
        "capture_item": tx.execute(f"DELETE FROM capture_item {where}", key).rowcount,
        "capture_identity_pin": tx.execute(
            f"DELETE FROM capture_identity_pin {where}", key
        ).rowcount,
        "receipt": tx.execute(f"DELETE FROM receipt {where}", key).rowcount,
    }


def delete_capture(tx: Transaction, tenant_id: str, capture_id: uuid.UUID) -> int:
    return tx.execute(
        "DELETE FROM capture WHERE tenant_id = %s AND capture_id = %s", (tenant_id, capture_id)
    ).rowcount


def captures_naming(tx: Transaction, evidence_key: str) -> int:
    """How many captures, of any tenant, name the artifact (keys are the content's
    hash, so tenants posting the same bytes share one object)."""
    row = tx.execute(
        "SELECT count(*) FROM capture WHERE evidence_key = %s", (evidence_key,)
    ).fetchone()
    return int(row[0]) if row else 0


def named_keys(tx: Transaction, after: str, limit: int) -> list[str]:
    """Distinct artifact keys named by captures, in order, after ``after``."""
    rows = tx.execute(
        "SELECT DISTINCT evidence_key FROM capture WHERE evidence_key > %s ORDER BY 1 LIMIT %s",
        (after, limit),
    ).fetchall()
    return [str(r[0]) for r in rows]


# The audit -------------------------------------------------------------------------


def record_capture_deletion(
    tx: Transaction, ref: CaptureRef, derived: dict[str, int], swept_by: str
) -> None:
    tx.execute(
        "INSERT INTO evidence_deletion (kind, reason, evidence_key, tenant_id, capture_id,"
        " derived, status, swept_by, completed_at)"
        " VALUES ('capture', 'expired', %s, %s, %s, %s, 'done', %s, clock_timestamp())",
        (ref.evidence_key, ref.tenant_id, ref.capture_id, Jsonb(derived), swept_by),
    )


def record_object_deletion(tx: Transaction, evidence_key: str, reason: str, swept_by: str) -> int:
    """A pending deletion of the object; returns its id."""
    row = tx.execute(
        "INSERT INTO evidence_deletion (kind, reason, evidence_key, status, swept_by)"
        " VALUES ('object', %s, %s, 'pending', %s) RETURNING id",
        (reason, evidence_key, swept_by),
    ).fetchone()
    assert row is not None
    return int(row[0])


def object_deletion_pending(tx: Transaction, evidence_key: str) -> bool:
    row = tx.execute(
        "SELECT EXISTS (SELECT 1 FROM evidence_deletion"
        " WHERE kind = 'object' AND evidence_key = %s AND status = 'pending')",
        (evidence_key,),
    ).fetchone()
    return bool(row and row[0])


@dataclass(frozen=True, slots=True)
class PendingDeletion:
    id: int
    evidence_key: str
    reason: str


def pending_object_deletions(tx: Transaction, limit: int) -> list[PendingDeletion]:
    rows = tx.execute(
        "SELECT id, evidence_key, reason FROM evidence_deletion"
        " WHERE status = 'pending' ORDER BY id LIMIT %s",
        (limit,),
    ).fetchall()
    return [PendingDeletion(int(i), str(k), str(r)) for i, k, r in rows]


def complete_object_deletion(tx: Transaction, deletion_id: int, status: str) -> bool:
    """Mark a pending deletion ``done`` or ``cancelled``; False if it was not pending
    (another sweep completed it)."""
    row = tx.execute(
        "UPDATE evidence_deletion SET status = %s, completed_at = clock_timestamp()"
        " WHERE id = %s AND status = 'pending' RETURNING 1",
        (status, deletion_id),
    ).fetchone()
    return row is not None


def cancel_pending(tx: Transaction, evidence_key: str) -> int:
    """Cancel the pending deletions of an object (an intake about to name it again);
    returns how many there were."""
    return tx.execute(
        "UPDATE evidence_deletion SET status = 'cancelled', completed_at = clock_timestamp()"
        " WHERE kind = 'object' AND evidence_key = %s AND status = 'pending'",
        (evidence_key,),
    ).rowcount


def lock_pending(tx: Transaction, deletion_id: int) -> bool:
    """Lock a deletion row FOR UPDATE; whether it is still pending."""
    row = tx.execute(
        "SELECT status FROM evidence_deletion WHERE id = %s FOR UPDATE", (deletion_id,)
    ).fetchone()
    return bool(row and row[0] == "pending")


def finished_object_deletions(tx: Transaction, evidence_key: str) -> int:
    """How many deletions of the object have been carried out (an intake compares the
    count before its put with the count while it commits)."""
    row = tx.execute(
        "SELECT count(*) FROM evidence_deletion"
        " WHERE kind = 'object' AND evidence_key = %s AND status = 'done'",
        (evidence_key,),
    ).fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True, slots=True)
class DeletionRow:
    id: int
    kind: str
    reason: str
    evidence_key: str
    tenant_id: str | None
    capture_id: uuid.UUID | None
    derived: dict[str, Any]
    status: str
    swept_by: str
    recorded_at: datetime
    completed_at: datetime | None


def deletions(tx: Transaction, after: int, limit: int) -> list[DeletionRow]:
    rows = tx.execute(
        "SELECT id, kind, reason, evidence_key, tenant_id, capture_id, derived, status,"
        " swept_by, recorded_at, completed_at FROM evidence_deletion WHERE id > %s"
        " ORDER BY id LIMIT %s",
        (after, limit),
    ).fetchall()
    return [DeletionRow(*r) for r in rows]


# Missing artifacts ------------------------------------------------------------------


def replace_missing(tx: Transaction, keys: Iterable[str]) -> None:
    """Make the flags exactly ``keys`` (a key flagged before keeps its first sighting)."""
    found = sorted(set(keys))
    tx.execute("DELETE FROM evidence_missing WHERE NOT (evidence_key = ANY(%s))", (found,))
    tx.execute(
        "INSERT INTO evidence_missing (evidence_key) SELECT unnest(%b::text[])"
        " ON CONFLICT (evidence_key) DO UPDATE SET checked_at = clock_timestamp()",
        (found,),
    )


@dataclass(frozen=True, slots=True)
class MissingCapture:
    evidence_key: str
    first_seen_at: datetime
    checked_at: datetime
    tenant_id: str
    capture_id: uuid.UUID


def missing(tx: Transaction, tenant_id: str | None = None) -> list[MissingCapture]:
    """Every capture naming a flagged artifact (one row per capture)."""
    rows = tx.execute(
        "SELECT m.evidence_key, m.first_seen_at, m.checked_at, c.tenant_id, c.capture_id"
        " FROM evidence_missing m JOIN capture c ON c.evidence_key = m.evidence_key"
        " WHERE %(tenant)s::text IS NULL OR c.tenant_id = %(tenant)s"
        " ORDER BY m.first_seen_at, m.evidence_key, c.tenant_id, c.capture_id",
        {"tenant": tenant_id},
    ).fetchall()
    return [MissingCapture(*r) for r in rows]


def missing_count(tx: Transaction) -> int:
    """Flagged artifacts some capture still names."""
    row = tx.execute(
        "SELECT count(*) FROM evidence_missing m"
        " WHERE EXISTS (SELECT 1 FROM capture c WHERE c.evidence_key = m.evidence_key)"
    ).fetchone()
    return int(row[0]) if row else 0


# Regression fixtures ----------------------------------------------------------------


def pin(
    tx: Transaction, tenant_id: str, capture_id: uuid.UUID, fixture: str, by: str, reason: str
) -> bool:
    """Pin a capture for a regression fixture; False if that pin existed. Raises a
    foreign-key violation when the capture does not exist."""
    row = tx.execute(
        "INSERT INTO evidence_fixture (tenant_id, capture_id, fixture, pinned_by, reason)"
        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1",
        (tenant_id, capture_id, fixture, by, reason),
    ).fetchone()
    return row is not None


def unpin(tx: Transaction, tenant_id: str, capture_id: uuid.UUID, fixture: str) -> bool:
    row = tx.execute(
        "DELETE FROM evidence_fixture WHERE tenant_id = %s AND capture_id = %s AND fixture = %s"
        " RETURNING 1",
        (tenant_id, capture_id, fixture),
    ).fetchone()
    return row is not None
