"""Inbox pruning against real PostgreSQL: only rows at or below every consumer's
progress and older than the window go, in bounded batches, never a parked one; and a
duplicate arriving after its row was pruned still changes nothing."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from db.control.epochs import EpochSource, ensure_epoch
from db.settings import DatabaseSettings
from processors.applier.batch import Applier
from processors.applier.inbox_pruning import InboxPruner, InboxRetention
from schemas.codec import CODEC
from tests.integration.processors.applier.test_applier_faults import (
    CATALOG,
    TENANT,
    Partition,
    on,
    read_state,
    upsert,
)

STREAM = (TENANT, CATALOG, 1)


@pytest.fixture()
def applier(clean_db: DatabaseSettings) -> Iterator[Applier]:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, TENANT, CATALOG)
    epochs = EpochSource(clean_db.control_dsn)
    applier = Applier(clean_db.product_dsn, epochs, CODEC)
    yield applier
    applier.close()
    epochs.close()


def age_inbox(dsn: str, seconds: int) -> None:
    """Make every inbox row of the test tenant look decided ``seconds`` ago."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE inbox SET received_at = now() - make_interval(secs => %s),"
            " decided_at = now() - make_interval(secs => %s) WHERE tenant_id = %s",
            (seconds, seconds, TENANT),
        )


def inbox_positions(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT position FROM inbox WHERE tenant_id = %s ORDER BY position", (TENANT,)
        ).fetchall()
    return [int(r[0]) for r in rows]


def test_only_decided_rows_older_than_the_window_go_in_batches(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    partition = Partition()
    # Positions 1-6 applied; 8 waits on an item no event has yet (parked); 7 missing,
    # so progress stops at 6 while 9 is applied above the hole.
    events = [upsert(p, f"i{p}", 1) for p in range(1, 7)]
    waiting = upsert(8, "w", 1, parent=on("absent", 1))
    above_hole = upsert(9, "i9", 1)
    applier.apply([partition.event(e) for e in [*events, waiting, above_hole]])
    assert read_state(clean_db.product_dsn).progress == {1: 6}

    window = 3600
    age_inbox(clean_db.product_dsn, 30)  # inside the window: nothing goes
    pruner = InboxPruner(clean_db.product_dsn, InboxRetention(window, batch_size=4))
    assert pruner.prune_once() == {}
    assert inbox_positions(clean_db.product_dsn) == [1, 2, 3, 4, 5, 6, 8, 9]

    age_inbox(clean_db.product_dsn, window + 60)
    assert pruner.prune_once() == {STREAM: 6}  # two batches: 4, then 2
    # What is left: the parked event and the one above the hole (above progress).
    assert inbox_positions(clean_db.product_dsn) == [8, 9]
    assert read_state(clean_db.product_dsn).parked == {waiting.event_id}

    # A second consumer of the same stream that has applied less keeps an inbox of its
    # own (a shadow rebuild's, say): it holds none of this consumer's rows.
    with psycopg.connect(clean_db.product_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO stream_progress (consumer, tenant_id, catalog_id, history_epoch,"
            " position) VALUES ('slower', %s, %s, 1, 0)",
            (TENANT, CATALOG),
        )
    # The hole closes: progress 7, stopped by the parked event at 8.
    applier.apply([partition.event(upsert(7, "i7", 1))])
    assert read_state(clean_db.product_dsn).progress == {1: 7}
    age_inbox(clean_db.product_dsn, window + 60)
    assert pruner.prune_once() == {STREAM: 1}
    assert inbox_positions(clean_db.product_dsn) == [8, 9]


def test_a_duplicate_after_its_inbox_row_was_pruned_changes_nothing(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    partition = Partition()
    events = [
        upsert(1, "parent", 1),
        upsert(2, "child", 1, parent=on("parent", 1)),
        upsert(3, "parent", 2, title="parent renamed"),
    ]
    messages = [partition.event(e) for e in events]
    applier.apply(messages)
    before = read_state(clean_db.product_dsn)
    assert before.progress == {1: 3}

    # Within the window the late copy is recognised by its id.
    within = applier.apply(messages)
    assert (within.duplicates, within.applied, within.ignored) == (3, 0, 0)

    age_inbox(clean_db.product_dsn, 7200)
    assert InboxPruner(clean_db.product_dsn, InboxRetention(3600)).prune_once() == {STREAM: 3}
    assert inbox_positions(clean_db.product_dsn) == []

    # After it, the same events again (a relay re-publishing, a Kafka redelivery):
    # every one is at or below progress, so a duplicate; nothing is applied, progress
    # stays where it is.
    late = applier.apply(messages)
    assert (late.applied, late.parked, late.released, late.quarantined) == (0, 0, 0, 0)
    assert (late.duplicates, late.ignored) == (len(messages), 0)
    after = read_state(clean_db.product_dsn)
    assert after.items == before.items
    assert after.progress == before.progress
    assert after.parked == set()
    # Nothing of them is recorded again: progress alone says they are done.
    assert after.inbox == {}
