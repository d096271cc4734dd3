"""One pass of the evidence sweep: expire captures nothing keeps, delete the objects
no capture names, flag the artifacts kept captures name that the bucket lacks.

Every deletion is recorded in ``evidence_deletion`` before or with what it deletes,
and rows always go before their object: a capture's rows in one transaction that
also records a pending deletion of its object (when no other capture names it),
then the object in a transaction of its own that completes that record. So a crash
leaves either everything, or rows gone with their object and its pending record
still there, which the next pass finishes (deleting a missing object succeeds: an
object missing on a later pass is fine when its rows are gone). A capture is never
deleted while anything keeps it (``db.resolver.evidence``'s reasons, checked again under its
locks), and an object never while any capture names it.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import psycopg

from db.repositories import capture_jobs
from db.resolver import evidence as sql
from db.resolver.evidence import CaptureRef
from db.unit_of_work import Transaction
from producers.capture.evidence import EvidenceStore
from producers.capture.worker import checkpoints

log = logging.getLogger(__name__)

EVIDENCE_PREFIX = "sha256/"
"""Where the intake puts artifacts (``rules.evidence_key``): the prefix listed."""


@dataclass(frozen=True, slots=True)
class SweepPolicy:
    window_seconds: float
    page_size: int = 200
    max_captures: int = 10_000
    swept_by: str = "evidence-sweeper"


@dataclass(frozen=True, slots=True)
class ObjectDeletion:
    evidence_key: str
    reason: str  # 'expired' (its last capture went) or 'orphan' (no capture ever named it)


@dataclass(slots=True)
class SweepReport:
    """What one pass deleted (or, in a dry run, would delete) and what it found."""

    dry_run: bool
    captures: list[CaptureRef] = field(default_factory=list)
    derived: Counter[str] = field(default_factory=Counter)
    objects: list[ObjectDeletion] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    kept: dict[str, int] = field(default_factory=dict)


def sweep(
    conn: psycopg.Connection, store: EvidenceStore, policy: SweepPolicy, dry_run: bool = False
) -> SweepReport:
    """One pass on an autocommit connection; each step commits on its own.

    1. finish the object deletions an earlier pass left pending (its crash);
    2. list the bucket's artifacts with their ages (before any capture goes, so an
       object put after this is never taken for an orphan: it is not listed);
    3. expire captures nothing keeps, oldest first, up to ``max_captures``, each in
       its own transaction (``expire_capture``), which records a pending deletion of
       the object when no capture names it any more;
    4. record the orphans: listed objects older than the window no capture names;
    5. carry out the pending object deletions (``delete_object``);
    6. flag the artifacts kept captures name that the listing lacks and a direct
       check confirms missing; the flags are replaced as a whole.
    A dry run reads the same and writes nothing, neither rows nor objects.
    """
    tx = Transaction(conn)
    report = SweepReport(dry_run)
    if dry_run:
        report.objects += [
            ObjectDeletion(p.evidence_key, p.reason)
            for p in sql.pending_object_deletions(tx, policy.max_captures)
        ]
    else:
        _carry_out_pending(conn, store, policy, report)
    listed = dict(store.listing(EVIDENCE_PREFIX))
    going = _expire(conn, policy, report, dry_run)
    cutoff = datetime.now(UTC) - timedelta(seconds=policy.window_seconds)
    for key, modified in sorted(listed.items()):
        if modified >= cutoff or key in going or sql.captures_naming(tx, key):
            continue
        if dry_run:
            report.objects.append(ObjectDeletion(key, "orphan"))
        else:
            record_orphan(conn, key, policy.swept_by)
    if not dry_run:
        _carry_out_pending(conn, store, policy, report)
    report.missing = _missing(tx, store, listed, going)
    if not dry_run:
        with conn.transaction():
            sql.replace_missing(tx, report.missing)
    report.kept = sql.kept_counts(tx, policy.window_seconds)
    return report


def _expire(
    conn: psycopg.Connection, policy: SweepPolicy, report: SweepReport, dry_run: bool
) -> set[str]:
    """Step 3; the keys whose last capture went (or would go)."""
    tx = Transaction(conn)
    after: tuple[datetime, str, uuid.UUID] | None = None
    candidates: list[CaptureRef] = []
    while len(candidates) < policy.max_captures:
        page = sql.expiring_captures(
            tx,
            policy.window_seconds,
            after,
            min(policy.page_size, policy.max_captures - len(candidates)),
        )
        if not page:
            break
        candidates += page
        last = page[-1]
        after = (last.created_at, last.tenant_id, last.capture_id)
    going: set[str] = set()
    if dry_run:
        report.captures = candidates
        per_key = Counter(c.evidence_key for c in candidates)
        for key, n in sorted(per_key.items()):
            if sql.captures_naming(tx, key) == n:
                going.add(key)
                report.objects.append(ObjectDeletion(key, "expired"))
        return going
    for ref in candidates:
        outcome = expire_capture(conn, ref, policy)
        if outcome is None:
            continue
        report.captures.append(ref)
        report.derived.update(outcome[0])
        if outcome[1]:
            going.add(ref.evidence_key)
    return going


def expire_capture(
    conn: psycopg.Connection, ref: CaptureRef, policy: SweepPolicy
) -> tuple[dict[str, int], bool] | None:
    """Delete one capture and everything derived from it, if nothing keeps it now.
    Returns the rows deleted per table and whether the object's deletion was
    recorded; None when the capture was kept (or already gone).

    One transaction:
    1. lock the artifact's key exclusive (the order intake takes it in: the key,
       then capture rows), so no intake commits a capture naming it meanwhile;
    2. lock the capture row FOR UPDATE (every new row referencing it checks its key,
       so a new job, product or fixture pin waits) and its jobs FOR UPDATE (a
       repair or a worker's claim waits); gone: nothing to do;
    3. ask again what keeps it, in a statement of its own that sees every commit
       made before these locks were granted; kept: end, having written nothing;
    4. delete its repair records, checkpoints, products (with their claims),
       identity pins, receipts, jobs and the capture, in that order (each before
       what it names);
    5. record the deletion with those counts;
    6. when no capture names the key any more (and no deletion is pending for it),
       record a pending deletion of the object;
    7. COMMIT.
    A crash before 7 leaves everything as it was. After 7 the rows are gone and the
    object is still there, with its pending deletion: ``delete_object`` (this pass
    or the next) removes it.
    """
    with conn.transaction():
        tx = Transaction(conn)
        sql.lock_key(tx, ref.evidence_key)
        if sql.lock_capture(tx, ref.tenant_id, ref.capture_id) is None:
            return None
        jobs = [j.job_id for j in capture_jobs.lock_of_capture(tx, ref.tenant_id, ref.capture_id)]
        reason = sql.kept_reason(tx, ref.tenant_id, ref.capture_id, policy.window_seconds)
        if reason is not None:
            log.info("capture %s/%s kept: %s", ref.tenant_id, ref.capture_id, reason)
            return None
        derived = {"capture_repair": capture_jobs.delete_repairs(tx, ref.tenant_id, jobs)}
        derived["capture_checkpoint"] = checkpoints.forget(tx, ref.tenant_id, jobs)
        derived.update(sql.delete_capture_rows(tx, ref.tenant_id, ref.capture_id))
        derived["intake_job"] = capture_jobs.delete_of_capture(tx, ref.tenant_id, ref.capture_id)
        derived["capture"] = sql.delete_capture(tx, ref.tenant_id, ref.capture_id)
        sql.record_capture_deletion(tx, ref, derived, policy.swept_by)
        last = sql.captures_naming(tx, ref.evidence_key) == 0
        if last and not sql.object_deletion_pending(tx, ref.evidence_key):
            sql.record_object_deletion(tx, ref.evidence_key, "expired", policy.swept_by)
    return derived, last


def record_orphan(conn: psycopg.Connection, evidence_key: str, swept_by: str) -> bool:
    """Record a pending deletion of an object no capture names (step 4); False when a
    capture names it now or its deletion is already pending. Under the key's lock,
    so no intake commits a capture naming it between the check and the record."""
    with conn.transaction():
        tx = Transaction(conn)
        sql.lock_key(tx, evidence_key)
        if sql.captures_naming(tx, evidence_key) or sql.object_deletion_pending(tx, evidence_key):
            return False
        sql.record_object_deletion(tx, evidence_key, "orphan", swept_by)
    return True


def delete_object(
    conn: psycopg.Connection, store: EvidenceStore, pending: sql.PendingDeletion
) -> str | None:
    """Carry out one pending object deletion: 'done', 'cancelled', or None when it is
    no longer pending (an intake cancelled it, or another sweep finished it).

    One transaction:
    1. lock the artifact's key exclusive, then the deletion row; not pending: end;
    2. a capture names the key (an intake committed since it was recorded): mark it
       cancelled, COMMIT;
    3. delete the object in the bucket (bounded; an object already gone is success);
    4. mark the deletion done (an intake counts these), COMMIT.
    The key's lock is held across 3, so an intake of the same bytes waits to commit
    until this ends and then sees the count moved (it puts again). A crash between
    3 and 4 leaves the object gone and the record pending: an intake that sees the
    pending record cancels it and puts again; otherwise the next pass repeats 3 (a
    no-op) and 4. A failed 3 rolls back: the record stays pending for the next pass.
    """
    with conn.transaction():
        tx = Transaction(conn)
        sql.lock_key(tx, pending.evidence_key)
        if not sql.lock_pending(tx, pending.id):
            return None
        if sql.captures_naming(tx, pending.evidence_key):
            sql.complete_object_deletion(tx, pending.id, "cancelled")
            return "cancelled"
        store.delete(pending.evidence_key)
        sql.complete_object_deletion(tx, pending.id, "done")
    return "done"


def _carry_out_pending(
    conn: psycopg.Connection, store: EvidenceStore, policy: SweepPolicy, report: SweepReport
) -> None:
    """Steps 1 and 5: every pending object deletion, oldest first."""
    tx = Transaction(conn)
    seen: set[int] = set()
    while page := [
        p for p in sql.pending_object_deletions(tx, policy.page_size) if p.id not in seen
    ]:
        for pending in page:
            seen.add(pending.id)
            outcome = delete_object(conn, store, pending)
            if outcome == "done":
                report.objects.append(ObjectDeletion(pending.evidence_key, pending.reason))
            elif outcome == "cancelled":
                report.cancelled.append(pending.evidence_key)


def _missing(
    tx: Transaction, store: EvidenceStore, listed: dict[str, datetime], going: set[str]
) -> list[str]:
    """Step 6: keys captures name that are neither listed nor, asked directly, there
    (an object put after the listing is there when asked)."""
    found: list[str] = []
    after = ""
    while keys := sql.named_keys(tx, after, 1000):
        for key in keys:
            if key not in listed and key not in going and not store.present(key):
                found.append(key)
        after = keys[-1]
    return found
