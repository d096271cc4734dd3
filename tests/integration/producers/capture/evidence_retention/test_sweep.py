"""The evidence sweep against real PostgreSQL and the real S3 server: what keeps a
capture, what goes with it, orphans, missing artifacts, dry runs and crashes between
the steps."""

from __future__ import annotations

import uuid

import pytest

from db.resolver import evidence as sql
from db.unit_of_work import Transaction
from producers.capture.evidence import EvidenceStore
from producers.capture.evidence_retention import fixtures
from producers.capture.evidence_retention.sweep import (
    SweepPolicy,
    delete_object,
    expire_capture,
    sweep,
)
from tests.integration.producers.capture.evidence_retention.conftest import (
    Captures,
    app,
    owner,
)

GONE = {
    "capture": 0,
    "receipt": 0,
    "intake_job": 0,
    "capture_item": 0,
    "capture_checkpoint": 0,
}
KEPT = {k: 1 for k in GONE}


def test_an_expired_capture_goes_with_its_derived_rows_then_its_object(
    captures: Captures, store: EvidenceStore, policy: SweepPolicy
) -> None:
    old = captures.make(b'{"items": ["old"]}')
    with app(captures.settings) as conn:
        report = sweep(conn, store, policy)
    assert [c.capture_id for c in report.captures] == [old.capture_id]
    assert captures.rows(old) == GONE
    assert not store.present(old.evidence_key)
    audit = captures.deletions()
    assert [(d["kind"], d["reason"], d["status"]) for d in audit] == [
        ("capture", "expired", "done"),
        ("object", "expired", "done"),
    ]
    assert audit[0]["capture_id"] == old.capture_id
    assert audit[0]["derived"] == {
        "capture": 1,
        "receipt": 1,
        "intake_job": 1,
        "capture_item": 1,
        "capture_checkpoint": 1,
        "capture_repair": 0,
        "capture_identity_pin": 0,
    }


@pytest.mark.parametrize(
    "keep",
    ["decision", "open review case", "regression fixture", "failed job", "retry", "young"],
)
def test_a_referenced_capture_is_never_deleted_whatever_its_age(
    captures: Captures, store: EvidenceStore, policy: SweepPolicy, keep: str
) -> None:
    built = captures.make(
        b'{"items": ["kept"]}',
        job_status="failed" if keep == "failed job" else "done",
        outcome="retryable" if keep == "retry" else "unchanged",
        age_seconds=60 if keep == "young" else 10 * policy.window_seconds,
    )
    if keep == "decision":
        captures.cite(built)
    elif keep == "open review case":
        captures.open_case(built)
    elif keep == "regression fixture":
        with app(captures.settings) as conn:
            assert fixtures.pin(conn, built.tenant_id, built.capture_id, "lamp", "ops", "golden")
    with app(captures.settings) as conn:
        report = sweep(conn, store, policy)
    assert report.captures == [] and report.objects == []
    assert captures.rows(built) == KEPT
    assert store.present(built.evidence_key)
    assert captures.deletions() == []


def test_a_decided_review_case_keeps_nothing_and_an_unpinned_fixture_lets_go(
    captures: Captures, store: EvidenceStore, policy: SweepPolicy
) -> None:
    decided = captures.make(b'{"items": ["decided"]}')
    captures.open_case(decided, status="decided")
    pinned = captures.make(b'{"items": ["pinned"]}')
    with app(captures.settings) as conn:
        fixtures.pin(conn, pinned.tenant_id, pinned.capture_id, "lamp", "ops", "golden")
        assert fixtures.unpin(conn, pinned.tenant_id, pinned.capture_id, "lamp")
        report = sweep(conn, store, policy)
    assert {c.capture_id for c in report.captures} == {decided.capture_id, pinned.capture_id}
    assert captures.rows(decided) == GONE and captures.rows(pinned) == GONE


def test_a_shared_artifact_goes_only_with_the_last_capture_naming_it(
    captures: Captures, store: EvidenceStore, policy: SweepPolicy
) -> None:
    same = b'{"items": ["shared"]}'
    expired = captures.make(same, tenant="t1")
    cited = captures.make(same, tenant="t2")
    captures.cite(cited)
    with app(captures.settings) as conn:
        sweep(conn, store, policy)
    assert captures.rows(expired) == GONE
    assert captures.rows(cited) == KEPT
    assert store.present(cited.evidence_key)
    assert [d["kind"] for d in captures.deletions()] == ["capture"]


def test_an_orphan_object_goes_only_once_older_than_the_window(
    captures: Captures, store: EvidenceStore
) -> None:
    """An intake stopped between its put and its commit leaves an object no row names."""
    key, _ = store.put(b'{"items": ["orphan"]}', "application/json")
    with app(captures.settings) as conn:
        young = sweep(conn, store, SweepPolicy(3600.0))
        assert young.objects == [] and store.present(key)
        old = sweep(conn, store, SweepPolicy(0.0))
    assert [(o.evidence_key, o.reason) for o in old.objects] == [(key, "orphan")]
    assert not store.present(key)
    assert [(d["kind"], d["reason"], d["status"]) for d in captures.deletions()] == [
        ("object", "orphan", "done")
    ]


def test_a_referenced_artifact_missing_from_the_bucket_is_flagged_and_kept(
    captures: Captures, store: EvidenceStore, policy: SweepPolicy
) -> None:
    built = captures.make(b'{"items": ["lost"]}')
    captures.cite(built)
    store.delete(built.evidence_key)  # lost outside the sweep
    with app(captures.settings) as conn:
        report = sweep(conn, store, policy)
        assert report.missing == [built.evidence_key]
        assert sql.missing_count(Transaction(conn)) == 1
        [flag] = sql.missing(Transaction(conn))
        assert (flag.tenant_id, flag.capture_id) == (built.tenant_id, built.capture_id)
        again = sweep(conn, store, policy)
    assert again.missing == [built.evidence_key] and again.captures == []
    assert captures.rows(built) == KEPT
    assert captures.deletions() == []
    # Restored (same bytes, same key): the next pass clears the flag.
    store.put(b'{"items": ["lost"]}', "application/json")
    with app(captures.settings) as conn:
        assert sweep(conn, store, policy).missing == []
        assert sql.missing_count(Transaction(conn)) == 0


def test_a_dry_run_reports_what_would_go_and_writes_nothing(
    captures: Captures, store: EvidenceStore, policy: SweepPolicy
) -> None:
    old = captures.make(b'{"items": ["old"]}')
    lost = captures.make(b'{"items": ["lost"]}')
    captures.cite(lost)
    store.delete(lost.evidence_key)
    orphan, _ = store.put(b'{"items": ["orphan"]}', "application/json")
    with app(captures.settings) as conn:
        report = sweep(conn, store, SweepPolicy(0.0), dry_run=True)
        assert sql.missing_count(Transaction(conn)) == 0
    assert [c.capture_id for c in report.captures] == [old.capture_id]
    assert {(o.evidence_key, o.reason) for o in report.objects} == {
        (old.evidence_key, "expired"),
        (orphan, "orphan"),
    }
    assert report.missing == [lost.evidence_key]
    assert captures.rows(old) == KEPT
    assert store.present(old.evidence_key) and store.present(orphan)
    assert captures.deletions() == []


def test_a_crash_after_the_rows_went_leaves_a_pending_deletion_the_next_pass_finishes(
    captures: Captures, store: EvidenceStore, policy: SweepPolicy
) -> None:
    old = captures.make(b'{"items": ["old"]}')
    [ref] = [
        r
        for r in sql.expiring_captures(
            Transaction(owner(captures.settings)), policy.window_seconds, None, 10
        )
    ]
    with app(captures.settings) as conn:
        outcome = expire_capture(conn, ref, policy)  # the pass dies after this commit
    assert outcome is not None and outcome[1]
    assert captures.rows(old) == GONE and store.present(old.evidence_key)
    assert [d["status"] for d in captures.deletions()] == ["done", "pending"]
    with app(captures.settings) as conn:
        report = sweep(conn, store, policy)
    assert [o.evidence_key for o in report.objects] == [old.evidence_key]
    assert not store.present(old.evidence_key)
    assert [d["status"] for d in captures.deletions()] == ["done", "done"]


def test_a_crash_after_the_object_went_is_finished_without_error(
    captures: Captures, store: EvidenceStore, policy: SweepPolicy
) -> None:
    """The object was deleted, the completion never committed: the record is pending
    for an object already gone, which is fine since no row names it."""
    key, _ = store.put(b'{"items": ["half"]}', "application/json")
    with app(captures.settings) as conn:
        with conn.transaction():
            sql.record_object_deletion(Transaction(conn), key, "orphan", "dead-sweeper")
        store.delete(key)
        report = sweep(conn, store, policy)
    assert [o.evidence_key for o in report.objects] == [key]
    assert [(d["status"]) for d in captures.deletions()] == ["done"]


def test_a_pending_deletion_of_an_artifact_named_again_is_cancelled_not_carried_out(
    captures: Captures, store: EvidenceStore, policy: SweepPolicy
) -> None:
    built = captures.make(b'{"items": ["again"]}', age_seconds=10)
    with app(captures.settings) as conn:
        with conn.transaction():
            sql.record_object_deletion(Transaction(conn), built.evidence_key, "orphan", "s")
        [pending] = sql.pending_object_deletions(Transaction(conn), 10)
        assert delete_object(conn, store, pending) == "cancelled"
    assert store.present(built.evidence_key)
    assert [d["status"] for d in captures.deletions()] == ["cancelled"]


def test_a_pin_of_an_unknown_capture_is_refused(captures: Captures) -> None:
    from producers.capture.exceptions import CaptureNotFound

    with app(captures.settings) as conn, pytest.raises(CaptureNotFound):
        fixtures.pin(conn, "t1", uuid.uuid4(), "lamp", "ops", "golden")
