"""A decision citing a capture while the sweep deletes it: the decision's share lock
on the capture makes the sweep wait and then keep the capture; a capture the sweep
deleted first refuses the decision (EVIDENCE_EXPIRED) with nothing stored."""

from __future__ import annotations

import dataclasses
import threading
import time

import psycopg
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.unit_of_work import UnitOfWork
from producers.capture.evidence import EvidenceStore
from producers.capture.evidence_retention.sweep import SweepPolicy, sweep
from producers.resolver.catalog_items import ItemChange
from producers.resolver.decisions import Decision, record_decision
from producers.resolver.exceptions import EvidenceExpired
from schemas.codec import CODEC
from schemas.events import EvidenceRef
from tests.fixtures.decisions import accept
from tests.integration.producers.capture.evidence_retention.conftest import (
    Built,
    Captures,
    app,
)

KEPT = {
    "capture": 1,
    "receipt": 1,
    "intake_job": 1,
    "capture_item": 1,
    "capture_checkpoint": 1,
}


def _citing(built: Built) -> Decision:
    return Decision(
        built.tenant_id,
        "c1",
        "accept",
        "reviewer",
        "seen in the capture",
        (EvidenceRef(capture_id=str(built.capture_id), locator="$.items[0]"),),
        facts=(
            ItemChange(built.tenant_id, "c1", "child", "lamp", "a lamp", parent_item_id="parent"),
        ),
    )


def _waiting(conn: psycopg.Connection, count: int) -> None:
    """Wait until ``count`` backends wait on a row lock (a condition, not a sleep)."""
    deadline = time.monotonic() + 30
    while True:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database()"
        ).fetchone()
        if row and row[0] >= count:
            return
        assert time.monotonic() < deadline, "nobody got to wait on the lock"


def test_a_sweep_waits_for_a_decision_citing_the_capture_and_keeps_it(
    captures: Captures, store: EvidenceStore, policy: SweepPolicy
) -> None:
    built = captures.make(b'{"items": ["cited"]}')
    settings = captures.settings
    pool = ConnectionPool(settings.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(settings.control_dsn)
    with UnitOfWork(pool, epochs, CODEC) as uow:
        accept(uow, built.tenant_id, "c1", ItemChange(built.tenant_id, "c1", "parent", "lamp", "p"))
    errors: list[BaseException] = []

    def decide() -> None:
        try:
            with UnitOfWork(pool, epochs, CODEC) as uow:
                record_decision(uow, _citing(built))
        except BaseException as exc:  # reported by the test below
            errors.append(exc)

    with app(settings) as blocker, app(settings) as watcher, app(settings) as sweeper_conn:
        # Hold the parent item, so the decision stops after its step 3, mid-transaction.
        blocker.execute("BEGIN")
        blocker.execute("SELECT 1 FROM catalog_item WHERE item_id = 'parent' FOR UPDATE")
        decision = threading.Thread(target=decide)
        decision.start()
        _waiting(watcher, 1)
        swept: list[object] = []
        sweeper = threading.Thread(target=lambda: swept.append(sweep(sweeper_conn, store, policy)))
        sweeper.start()
        _waiting(watcher, 2)  # the sweep waits for the decision's share lock
        blocker.execute("COMMIT")
        decision.join(30)
        sweeper.join(30)
    pool.close()
    epochs.close()
    assert errors == []
    assert captures.rows(built) == KEPT  # the sweep saw the decision and kept it all
    assert store.present(built.evidence_key)


def test_a_decision_on_a_capture_deleted_while_it_waited_is_refused(
    captures: Captures, store: EvidenceStore
) -> None:
    """The sweep's transaction has deleted the capture but not committed when the
    decision looks: the decision sees the capture, waits for the lock, and finds it
    gone once the sweep commits. It is refused, and nothing of it is stored."""
    built = captures.make(b'{"items": ["gone"]}')
    settings = captures.settings
    pool = ConnectionPool(settings.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(settings.control_dsn)
    failure: list[BaseException] = []

    def decide() -> None:
        decision = dataclasses.replace(
            _citing(built), facts=(ItemChange(built.tenant_id, "c1", "x", "lamp", "x"),)
        )
        try:
            with UnitOfWork(pool, epochs, CODEC) as uow:
                record_decision(uow, decision)
        except BaseException as exc:  # reported by the test below
            failure.append(exc)

    key = (built.tenant_id, built.capture_id)
    with psycopg.connect(settings.resolver_owner_dsn) as sweeping, app(settings) as watcher:
        # What the sweep's transaction deletes, held uncommitted.
        sweeping.execute("DELETE FROM capture_checkpoint WHERE job_id = %s", (built.job_id,))
        for table in ("capture_item", "receipt", "intake_job", "capture"):
            sweeping.execute(f"DELETE FROM {table} WHERE tenant_id = %s AND capture_id = %s", key)
        decision = threading.Thread(target=decide)
        decision.start()
        _waiting(watcher, 1)
        sweeping.commit()
        decision.join(30)
        decisions = watcher.execute("SELECT count(*) FROM decision").fetchone()
        items = watcher.execute("SELECT count(*) FROM catalog_item").fetchone()
    pool.close()
    epochs.close()
    assert [type(e) for e in failure] == [EvidenceExpired]
    assert decisions == (0,) and items == (0,)
