"""The cursor lock against real PostgreSQL: contiguous positions in commit order."""

from __future__ import annotations

import random
import threading
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.exceptions import EpochChanged
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from producers.resolver.catalog_items import ItemChange
from producers.resolver.decisions import record_decision
from producers.resolver.facts import DecisionScope, Fact
from schemas.codec import CODEC
from schemas.events import Envelope
from tests.fixtures.decisions import accept, by_rule


class Rollback(Exception):
    pass


class Abandon:
    """A fact that gives up after the decision and the facts before it are written."""

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        raise Rollback()


def test_concurrent_writers_get_contiguous_positions_in_commit_order(
    clean_db: DatabaseSettings,
) -> None:
    writers, per_writer = 12, 25
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=writers, max_size=writers, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    committed_order: list[int] = []
    order_lock = threading.Lock()
    committed = rolled_back = 0
    count_lock = threading.Lock()

    class OrderedUnitOfWork(UnitOfWork):
        """Always under the cursor lock (an unlocked write would take the cursor's
        row lock inside ``order_lock``, while a locked writer holding that row lock
        waits for ``order_lock``: the test's own lock would close a cycle)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, unlocked_reads=False, **kwargs)

        def commit(self) -> list[Envelope]:
            # Commit while the cursor lock is held, then note the order in which
            # commits returned; the lock makes them line up.
            with order_lock:
                envelopes = super().commit()
                committed_order.extend(e.position for e in envelopes)
            return envelopes

    def write(worker: int) -> None:
        nonlocal committed, rolled_back
        rng = random.Random(worker)
        for n in range(per_writer):
            item = ItemChange("t1", "c1", f"w{worker}-{n}", "shoe", f"item {worker} {n}")
            facts: tuple[Fact, ...] = (item, Abandon()) if rng.random() < 0.3 else (item,)
            try:
                with OrderedUnitOfWork(pool, epochs, CODEC) as uow:
                    record_decision(uow, by_rule("t1", "c1", *facts))
                with count_lock:
                    committed += 1
            except Rollback:
                with count_lock:
                    rolled_back += 1

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pool.close()

    with psycopg.connect(clean_db.resolver_dsn) as conn:
        positions = [
            r[0]
            for r in conn.execute(
                "SELECT position FROM outbox WHERE tenant_id='t1' ORDER BY position"
            )
        ]
        cursor = conn.execute("SELECT position FROM stream_cursor WHERE tenant_id='t1'").fetchone()
        items = conn.execute("SELECT count(*) FROM catalog_item").fetchone()
        decisions = conn.execute("SELECT count(*) FROM decision").fetchone()
    # Each committed decision wrote two events: its own and its item's.
    assert rolled_back > 0 and committed > 0
    assert positions == list(range(1, 2 * committed + 1))
    assert cursor == (2 * committed,)
    assert items == decisions == (committed,)
    assert committed_order == sorted(committed_order)


def test_readers_never_see_a_hole_while_writers_commit(clean_db: DatabaseSettings) -> None:
    """Readers never see a hole: position order is commit order.

    An observer polls the committed outbox while writers commit concurrently. If a
    later position could commit before an earlier one, the observer would see a
    prefix with a hole in it.
    """
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=6, max_size=6, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    stop = threading.Event()
    violations: list[str] = []

    def observe() -> None:
        with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
            while not stop.is_set():
                rows = [
                    r[0]
                    for r in conn.execute(
                        "SELECT position FROM outbox WHERE tenant_id='t2' ORDER BY position"
                    )
                ]
                if rows != list(range(1, len(rows) + 1)):
                    violations.append(f"hole in visible positions: {rows[-5:]}")

    def write(worker: int) -> None:
        for n in range(30):
            with UnitOfWork(pool, epochs, CODEC) as uow:
                accept(uow, "t2", "c1", ItemChange("t2", "c1", f"{worker}-{n}", "shoe", "x"))

    observer = threading.Thread(target=observe)
    observer.start()
    threads = [threading.Thread(target=write, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    observer.join()
    pool.close()
    assert violations == []


def test_a_first_write_issues_its_epoch_only_when_accepted_and_yields_to_a_fence(
    clean_db: DatabaseSettings,
) -> None:
    """A catalog's first write issues epoch 1 just before COMMIT. A rolled-back one
    issues nothing; one that finds another epoch issued meanwhile (an operator's)
    writes nothing and raises ``EpochChanged``; its retry lands in that epoch."""
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=1, open=True)
    epochs = EpochSource(clean_db.control_dsn)

    def epoch_rows() -> list[tuple[str, int]]:
        with psycopg.connect(clean_db.control_dsn) as conn:
            rows = conn.execute("SELECT catalog_id, epoch FROM history_epoch").fetchall()
        return sorted((str(c), int(e)) for c, e in rows)

    try:
        with UnitOfWork(pool, epochs, CODEC) as uow:
            item = ItemChange("t1", "c1", "i0", "shoe", "abandoned")
            with pytest.raises(Rollback):
                record_decision(uow, by_rule("t1", "c1", item, Abandon()))
        assert epoch_rows() == []

        with pytest.raises(EpochChanged), UnitOfWork(pool, epochs, CODEC) as uow:
            item = ItemChange("t1", "c1", "i1", "shoe", "first")
            writer = uow.stream("t1", "c1")
            assert writer.stream.history_epoch == 1
            with psycopg.connect(clean_db.control_dsn) as conn:  # an operator's fence
                conn.execute(
                    "INSERT INTO history_epoch (tenant_id, catalog_id, epoch, reason)"
                    " VALUES ('t1', 'c1', 2, 'restored')"
                )
            record_decision(uow, by_rule("t1", "c1", item))
        with psycopg.connect(clean_db.resolver_dsn) as conn:
            assert conn.execute("SELECT count(*) FROM outbox").fetchone() == (0,)

        with UnitOfWork(pool, epochs, CODEC) as uow:
            record_decision(uow, by_rule("t1", "c1", ItemChange("t1", "c1", "i1", "shoe", "x")))
        assert {e.history_epoch for e in uow.envelopes} == {2}
        assert epoch_rows() == [("c1", 2)]
    finally:
        pool.close()
        epochs.close()


def test_a_short_outbox_write_fails_its_commit_and_leaves_nothing(
    clean_db: DatabaseSettings,
) -> None:
    """The outbox statement and the COMMIT go in one round trip, so the server checks
    the counts: a write that lost rows (here a trigger drops every second one) raises,
    and the decision, its items, its rows and the cursor stay as they were."""
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=1, open=True)
    epochs = EpochSource(clean_db.control_dsn)

    def counts() -> tuple[object, ...]:
        with psycopg.connect(clean_db.resolver_dsn) as conn:
            row = conn.execute(
                "SELECT (SELECT count(*) FROM decision), (SELECT count(*) FROM catalog_item),"
                " (SELECT count(*) FROM outbox), (SELECT position FROM stream_cursor)"
            ).fetchone()
        assert row is not None
        return tuple(row)

    def items(*ids: str) -> tuple[Fact, ...]:
        return tuple(ItemChange("t1", "c1", i, "shoe", f"item {i}") for i in ids)

    try:
        with UnitOfWork(pool, epochs, CODEC) as uow:
            record_decision(uow, by_rule("t1", "c1", *items("a")))
        before = counts()
        assert before == (1, 1, 2, 2)
        owner = clean_db.resolver_owner_dsn
        with psycopg.connect(owner, autocommit=True) as conn:
            conn.execute(
                "CREATE OR REPLACE FUNCTION drop_even() RETURNS trigger LANGUAGE plpgsql AS"
                " $$ BEGIN IF NEW.position % 2 = 0 THEN RETURN NULL; END IF; RETURN NEW; END $$"
            )
            conn.execute("DROP TRIGGER IF EXISTS drop_even ON outbox")
            conn.execute(
                "CREATE TRIGGER drop_even BEFORE INSERT ON outbox"
                " FOR EACH ROW EXECUTE FUNCTION drop_even()"
            )
        incomplete = pytest.raises(psycopg.errors.DataException, match="outbox write incomplete")
        with incomplete, UnitOfWork(pool, epochs, CODEC) as uow:
            record_decision(uow, by_rule("t1", "c1", *items("b", "c")))
        assert counts() == before
        drop_trigger(owner)
        with UnitOfWork(pool, epochs, CODEC) as uow:
            record_decision(uow, by_rule("t1", "c1", *items("b", "c")))
        assert [e.position for e in uow.envelopes] == [3, 4, 5]
        assert counts() == (2, 3, 5, 5)
    finally:
        drop_trigger(clean_db.resolver_owner_dsn)
        pool.close()
        epochs.close()


def drop_trigger(owner_dsn: str) -> None:
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        conn.execute("DROP TRIGGER IF EXISTS drop_even ON outbox")
        conn.execute("DROP FUNCTION IF EXISTS drop_even()")
