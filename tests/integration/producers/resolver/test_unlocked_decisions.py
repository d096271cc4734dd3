"""A decision read without the cursor lock and written in one statement
(``UnitOfWork.unlocked_first``), on real connections: what it sends, and every way
its write can meet a change made after its reads. Each ends with the decision
recorded exactly once, or refused as under the lock, and positions contiguous."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from db.control.epochs import issue_next
from db.resolver.fencing import fence_older_epochs
from db.settings import DatabaseSettings
from db.unlocked import Unlocked, contended, doubted, known_cursors
from producers.resolver.catalog_items import ItemChange
from producers.resolver.decisions import Decision, record_decision
from producers.resolver.exceptions import StaleRevision
from producers.resolver.review_cases import CaseRevision, open_case
from schemas.events import Envelope
from schemas.ids import StreamId
from tests.integration.producers.resolver.conftest import (
    UowFactory,
    add_item,
    assert_contiguous_outbox,
)
from tests.integration.producers.resolver.test_races import decision


def new_item(item_id: str, case: CaseRevision | None = None, catalog: str = "c1") -> Decision:
    return decision(
        ItemChange("t1", catalog, item_id, "shoe", f"item {item_id}"), catalog=catalog, case=case
    )


@pytest.fixture()
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every statement any connection sends, in order."""
    queries: list[str] = []
    real = psycopg.Connection.execute

    def logging(self: psycopg.Connection, query: Any, params: Any = None, **kw: Any) -> Any:
        queries.append(str(query))
        return real(self, query, params, **kw)

    monkeypatch.setattr(psycopg.Connection, "execute", logging)
    yield queries


@pytest.fixture()
def before_write(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[], None]], None]:
    """Run a step between an unlocked unit's reads and its write, once."""

    def arrange(step: Callable[[], None]) -> None:
        real = Unlocked.commit
        done: list[bool] = []

        def commit(self: Unlocked, *args: Any) -> list[Envelope]:
            if not done:
                done.append(True)
                step()
            return real(self, *args)

        monkeypatch.setattr(Unlocked, "commit", commit)

    return arrange


def rows(dsn: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query, params).fetchall()


def outbox(dsn: str) -> list[tuple[int, int, str]]:
    return [
        (int(e), int(p), str(t))
        for e, p, t in rows(
            dsn, "SELECT history_epoch, position, event_type FROM outbox ORDER BY 1, 2"
        )
    ]


def test_a_decision_on_a_written_stream_takes_two_statements_and_no_lock(
    uow: UowFactory, clean_db: DatabaseSettings, sent: list[str]
) -> None:
    add_item(uow, "first")  # the stream's first write (its epoch issued) goes locked
    known_cursors.clear()  # as a process that has not written the stream itself
    sent.clear()
    with uow() as u:
        recorded = record_decision(u, new_item("second"))
    decision_statements = [q for q in sent if "history_epoch FROM history_epoch" not in q]
    assert len(decision_statements) == 2, decision_statements
    read, write = decision_statements
    assert read.startswith("SELECT c.position, c.fenced_for_epoch") and "catalog_item" in read
    assert write.startswith("WITH w0 AS (UPDATE stream_cursor") and "INSERT INTO outbox" in write
    assert not any("FOR UPDATE" in q or q in ("BEGIN", "COMMIT") for q in sent)
    assert [a.revision for a in recorded.aggregates] == [1, 1]
    assert outbox(clean_db.resolver_dsn) == [
        (1, 1, "decision.recorded"),
        (1, 2, "catalog_item.upserted"),
        (1, 3, "decision.recorded"),
        (1, 4, "catalog_item.upserted"),
    ]


def test_a_decision_on_a_stream_this_process_wrote_last_is_one_statement(
    uow: UowFactory, clean_db: DatabaseSettings, sent: list[str]
) -> None:
    """Its cursor is where this process's commit left it, and the new item is presumed
    absent: nothing to read. The write is the same statement, moving the cursor only
    from the known position and inserting the item with a plain INSERT."""
    add_item(uow, "first")
    sent.clear()
    for item_id in ("second", "third"):
        with uow() as u:
            recorded = record_decision(u, new_item(item_id))
        assert [a.revision for a in recorded.aggregates] == [1, 1]
    statements = [q for q in sent if "history_epoch FROM history_epoch" not in q]
    assert len(statements) == 2, statements
    assert all(q.startswith("WITH w0 AS (UPDATE stream_cursor") for q in statements)
    assert [p for _, p, _ in outbox(clean_db.resolver_dsn)] == [1, 2, 3, 4, 5, 6]
    assert ("t1", "c1") not in doubted and ("t1", "c1") not in contended


def test_a_cursor_another_process_moved_makes_the_known_one_wrong_once(
    uow: UowFactory, clean_db: DatabaseSettings, sent: list[str]
) -> None:
    """The known cursor is a guess: written elsewhere since, the write moves no cursor
    and writes nothing, the decision goes again under the lock after the other one,
    and this process reads the stream's cursor again for a while (not under the
    lock: its writers have not met)."""
    add_item(uow, "first")
    stream = StreamId("t1", "c1", 1)
    at = known_cursors.get(stream)
    add_item(uow, "elsewhere")
    assert at is not None
    known_cursors.record(stream, at)  # what this process knew before the other wrote
    with uow() as u:
        record_decision(u, new_item("late"))
        assert [e.position for e in u.envelopes] == [5, 6]
    assert ("t1", "c1") in doubted and ("t1", "c1") not in contended
    sent.clear()
    with uow() as u:
        record_decision(u, new_item("next"))
    assert sent[0].startswith("SELECT c.position") and not any("FOR UPDATE" in q for q in sent)
    dsn = clean_db.resolver_dsn
    assert [p for _, p, _ in outbox(dsn)] == list(range(1, 9))
    assert rows(dsn, "SELECT count(*) FROM decision") == [(4,)]
    assert_contiguous_outbox(dsn)


def test_an_item_presumed_absent_that_exists_gets_its_next_revision(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    """A rule's change of an item that exists: the plain INSERT its absence was
    presumed for is refused, nothing is written, and the decision goes again under
    the lock, where the item is read and upserted at revision 2."""
    add_item(uow, "first")
    with uow() as u:
        recorded = record_decision(u, new_item("first"))
    assert [a.revision for a in recorded.aggregates] == [1, 2]
    assert ("t1", "c1") in doubted
    dsn = clean_db.resolver_dsn
    assert rows(dsn, "SELECT item_id, revision FROM catalog_item") == [("first", 2)]
    assert [p for _, p, _ in outbox(dsn)] == [1, 2, 3, 4]
    assert rows(dsn, "SELECT count(*) FROM decision") == [(2,)]


def test_a_writer_committing_after_the_reads_sends_the_decision_under_the_lock(
    uow: UowFactory,
    clean_db: DatabaseSettings,
    before_write: Callable[[Callable[[], None]], None],
) -> None:
    add_item(uow, "first")

    def meanwhile() -> None:
        add_item(uow, "meanwhile")

    before_write(meanwhile)
    with uow() as u:
        record_decision(u, new_item("late"))
        positions = [e.position for e in u.envelopes]
    dsn = clean_db.resolver_dsn
    # The cursor moved after the reads: the write matched no cursor row, wrote
    # nothing, and the decision went again under the lock, after the other one.
    assert positions == [5, 6]
    assert [p for _, p, _ in outbox(dsn)] == [1, 2, 3, 4, 5, 6]
    assert rows(dsn, "SELECT count(*) FROM decision") == [(3,)]
    assert rows(
        dsn, "SELECT item_id, revision FROM catalog_item WHERE item_id <> 'first' ORDER BY 1"
    ) == [("late", 1), ("meanwhile", 1)]
    assert_contiguous_outbox(dsn)


def test_a_stream_whose_write_was_refused_is_written_under_the_lock_for_a_while(
    uow: UowFactory,
    clean_db: DatabaseSettings,
    before_write: Callable[[Callable[[], None]], None],
    sent: list[str],
) -> None:
    """Its writers meet each other: reading without the lock would be redone anyway."""
    add_item(uow, "first")
    add_item(uow, "other", catalog="c2")
    known_cursors.clear()  # the cursor is read, not known: refused, it is contention

    def meanwhile() -> None:
        add_item(uow, "meanwhile")

    before_write(meanwhile)
    with uow() as u:
        record_decision(u, new_item("late"))
    sent.clear()
    with uow() as u:
        record_decision(u, new_item("next"))
    assert any("FOR UPDATE" in q for q in sent)  # c1: under the lock, straight away
    assert not any(q.startswith("SELECT c.position") for q in sent)
    sent.clear()
    with uow() as u:
        record_decision(u, new_item("elsewhere", catalog="c2"))
    assert not any("FOR UPDATE" in q for q in sent)  # c2: its writers never met
    assert_contiguous_outbox(clean_db.resolver_dsn)


def test_a_case_advanced_after_the_reads_is_refused_as_stale(
    uow: UowFactory,
    clean_db: DatabaseSettings,
    before_write: Callable[[Callable[[], None]], None],
) -> None:
    add_item(uow, "first")
    with uow() as u:
        open_case(u, "t1", "c1", "case-1", "catalog_item", "x")
        u.commit()
    against = CaseRevision("case-1", 1)

    def other_reviewer() -> None:
        with uow() as u:
            record_decision(u, new_item("theirs", against))

    before_write(other_reviewer)
    with pytest.raises(StaleRevision), uow() as u:
        record_decision(u, new_item("mine", against))
    dsn = clean_db.resolver_dsn
    assert rows(dsn, "SELECT revision FROM review_case WHERE case_id = 'case-1'") == [(2,)]
    assert rows(dsn, "SELECT count(*) FROM catalog_item WHERE item_id = 'mine'") == [(0,)]
    assert [p for _, p, _ in outbox(dsn)] == [1, 2, 3, 4]


def test_a_fence_after_the_reads_moves_the_decision_to_the_current_epoch(
    uow: UowFactory,
    clean_db: DatabaseSettings,
    before_write: Callable[[Callable[[], None]], None],
) -> None:
    add_item(uow, "first")

    def restore_drill() -> None:
        with psycopg.connect(clean_db.control_dsn) as conn:
            issue_next(conn, "t1", "c1", 1, "op-ann", "restored")
        with psycopg.connect(clean_db.resolver_dsn) as conn:
            fence_older_epochs(conn, "t1", "c1", 2)

    before_write(restore_drill)
    with uow() as u:
        record_decision(u, new_item("after-fence"))
    assert outbox(clean_db.resolver_dsn) == [
        (1, 1, "decision.recorded"),
        (1, 2, "catalog_item.upserted"),
        (2, 1, "decision.recorded"),
        (2, 2, "catalog_item.upserted"),
    ]


def test_a_write_whose_connection_dies_leaves_nothing(
    uow: UowFactory, clean_db: DatabaseSettings, before_write: Callable[[Callable[[], None]], None]
) -> None:
    """The write waits on the cursor row another transaction holds; its backend is
    terminated there. The error is raised as it is (the caller learns the outcome is
    unknown, as for a lost COMMIT) and the statement left nothing behind."""
    add_item(uow, "first")
    dsn = clean_db.resolver_dsn
    holder = psycopg.connect(dsn)
    holder.execute("SELECT position FROM stream_cursor FOR UPDATE")
    pids: list[int] = []

    def note_backend() -> None:
        pids.extend(r[0] for r in rows(dsn, "SELECT pg_backend_pid()"))  # not the writer's

    before_write(note_backend)
    outcome: list[BaseException] = []

    def decide() -> None:
        try:
            with uow() as u:
                record_decision(u, new_item("doomed"))
        except BaseException as exc:  # the outcome under test
            outcome.append(exc)

    writer = threading.Thread(target=decide)
    writer.start()
    with psycopg.connect(dsn, autocommit=True) as admin:
        waiting: list[tuple[Any, ...]] = []
        for _ in range(500):
            waiting = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE 'WITH w0 AS (UPDATE stream_cursor%%'"
            ).fetchall()
            if waiting:
                break
            threading.Event().wait(0.02)
        assert waiting, "the joined write never waited on the cursor row"
        admin.execute("SELECT pg_terminate_backend(%s)", (waiting[0][0],))
    writer.join(30)
    holder.rollback()
    holder.close()
    assert outcome and isinstance(outcome[0], psycopg.OperationalError), outcome
    assert rows(dsn, "SELECT count(*) FROM catalog_item WHERE item_id = 'doomed'") == [(0,)]
    assert [p for _, p, _ in outbox(dsn)] == [1, 2]
    with uow() as u:
        record_decision(u, new_item("next"))
    assert [p for _, p, _ in outbox(dsn)] == [1, 2, 3, 4]


def test_many_writers_of_one_stream_lose_and_double_nothing(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    """Eight threads on one stream: most writes meet another's commit and go again
    under the lock, locked and unlocked writes interleave; every decision is recorded
    once, at contiguous positions."""
    add_item(uow, "first")
    writers, each = 8, 15
    failures: list[BaseException] = []

    def write(w: int) -> None:
        for n in range(each):
            try:
                with uow() as u:
                    record_decision(u, new_item(f"w{w}-{n}"))
            except BaseException as exc:  # every one must commit
                failures.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    dsn = clean_db.resolver_dsn
    assert rows(dsn, "SELECT count(*) FROM decision") == [(1 + writers * each,)]
    assert rows(dsn, "SELECT count(*), count(DISTINCT event_id) FROM outbox") == [
        (2 * (1 + writers * each), 2 * (1 + writers * each))
    ]
    assert_contiguous_outbox(dsn)


def test_a_variant_naming_its_parent_is_read_without_the_lock(
    uow: UowFactory, clean_db: DatabaseSettings, sent: list[str]
) -> None:
    """The parent is read plainly and share-locked by the write at the revision its
    variant's event depends on."""
    add_item(uow, "parent")
    sent.clear()
    with uow() as u:
        record_decision(u, decision(ItemChange("t1", "c1", "variant", "shoe", "v", "parent")))
        (_, variant) = u.envelopes
    assert not any("FOR UPDATE" in q or q in ("BEGIN", "COMMIT") for q in sent), sent
    assert [d.id for d in variant.dependencies] == ["parent"]
    assert [d.revision for d in variant.dependencies] == [1]
    assert_contiguous_outbox(clean_db.resolver_dsn)


def test_a_parent_changed_behind_the_cursor_after_the_reads_is_named_at_its_new_revision(
    uow: UowFactory,
    clean_db: DatabaseSettings,
    before_write: Callable[[Callable[[], None]], None],
) -> None:
    """A writer that does not move the cursor (none of the domain's) changes the parent
    between the reads and the write: the share lock finds it at another revision, the
    write is refused, and the variant goes under the lock, depending on what it then
    finds."""
    add_item(uow, "parent")
    dsn = clean_db.resolver_dsn

    def behind_the_cursor() -> None:
        with psycopg.connect(dsn) as conn:
            conn.execute("UPDATE catalog_item SET revision = 2 WHERE item_id = 'parent'")

    before_write(behind_the_cursor)
    with uow() as u:
        record_decision(u, decision(ItemChange("t1", "c1", "variant", "shoe", "v", "parent")))
        (_, variant) = u.envelopes
    assert [d.revision for d in variant.dependencies] == [2]
    assert rows(dsn, "SELECT count(*) FROM catalog_item WHERE item_id = 'variant'") == [(1,)]
    assert_contiguous_outbox(dsn)
