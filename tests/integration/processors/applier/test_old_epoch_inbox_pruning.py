"""Inbox pruning and a superseded epoch, against real PostgreSQL.

After the product side settles a fence, the old epoch's inbox (the audit of its
deliveries, ``ignored_old_epoch`` ones included) is kept whole for the fenced
retention period, even rows the live rule would prune; after it every row goes in
bounded batches (above progress too), each audit row at least that long after its
own decision; the progress row stays; the live epoch keeps the live rule; a batch
killed mid-way leaves the rest for the next pass; the gap closer leaves the
superseded stream alone. Time is the database clock: rows are moved into the past.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from prometheus_client import REGISTRY
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource, ensure_epoch
from db.resolver.fencing import fence_older_epochs, settle_old_epochs
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from processors.applier.batch import DEFAULT_CONSUMER, Applier
from processors.applier.inbox_pruning import InboxPruner, InboxRetention
from processors.applier.messages import RawMessage
from processors.gaps import GapCloser
from processors.reporter import NEEDS_REBUILD
from processors.resolver_client import ResolverClient
from producers.resolver.catalog_items import ItemChange
from producers.retention.pruner import RetentionPolicy, prune_stream
from schemas.codec import CODEC
from schemas.ids import StreamId
from tests.fixtures.decisions import accept
from tests.fixtures.resolver_api import RunningApi
from tests.integration.processors.applier.test_applier_faults import (
    CATALOG,
    TENANT,
    Partition,
    cut_over,
    on,
    read_state,
    set_epoch,
    upsert,
)

OLD, NEW = (TENANT, CATALOG, 1), (TENANT, CATALOG, 2)
DAY = 86_400
WINDOW = 3600


@pytest.fixture()
def applier(clean_db: DatabaseSettings) -> Iterator[Applier]:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, TENANT, CATALOG)
    epochs = EpochSource(clean_db.control_dsn, ttl_seconds=0)
    applier = Applier(clean_db.product_dsn, epochs, CODEC)
    yield applier
    applier.close()
    epochs.close()


def sql(dsn: str, statement: str, *params: object) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement, params)


def decided_ago(dsn: str, epoch: int, seconds: float, position: int | None = None) -> None:
    """Make the epoch's inbox rows (or one of them) look decided ``seconds`` ago."""
    sql(
        dsn,
        "UPDATE inbox SET decided_at = now() - make_interval(secs => %s)"
        " WHERE tenant_id = %s AND history_epoch = %s AND (%s::int8 IS NULL OR position = %s)",
        seconds,
        TENANT,
        epoch,
        position,
        position,
    )


def settled_ago(dsn: str, seconds: float) -> None:
    sql(
        dsn,
        "UPDATE superseded_epoch SET settled_at = now() - make_interval(secs => %s)"
        " WHERE tenant_id = %s",
        seconds,
        TENANT,
    )


def positions(dsn: str, epoch: int) -> list[int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT position FROM inbox WHERE tenant_id = %s AND history_epoch = %s"
            " ORDER BY position",
            (TENANT, epoch),
        ).fetchall()
    return [int(r[0]) for r in rows]


def superseded_history(clean_db: DatabaseSettings, applier: Applier) -> Partition:
    """Epoch 1: positions 1-4 applied, 6 parked (it waits on an absent item), 5 missing.
    Then epoch 2 issued and the fence settled (6 becomes ``ignored_old_epoch``); late
    old-epoch deliveries at 5 and 8 are audited ``ignored_old_epoch`` (progress 6, 8
    above the hole at 7); epoch 2 applies 1-3."""
    partition = Partition()
    events = [upsert(p, f"i{p}", 1) for p in range(1, 5)]
    applier.apply([partition.event(e) for e in [*events, upsert(6, "w", 1, on("absent", 1))]])
    set_epoch(clean_db.control_dsn, 2)
    with psycopg.connect(clean_db.product_dsn) as conn:
        assert settle_old_epochs(conn, DEFAULT_CONSUMER, TENANT, CATALOG, 2).parked == 1
        conn.commit()
    late = applier.apply([partition.event(upsert(p, f"late{p}", 1)) for p in (5, 8)])
    assert late.ignored == 2
    cut_over(clean_db.product_dsn, 2)  # the fence's rebuild: epoch 2 is released
    live = [upsert(p, f"n{p}", 1, epoch=2) for p in range(1, 4)]
    assert applier.apply([partition.event(e) for e in live]).applied == 3
    state = read_state(clean_db.product_dsn)
    assert state.progress == {1: 6, 2: 3}
    assert {o for o in state.inbox.values()} == {"applied", "ignored_old_epoch"}
    return partition


def test_the_old_epochs_audit_is_kept_for_its_period_then_pruned_and_progress_stays(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    dsn = clean_db.product_dsn
    partition = superseded_history(clean_db, applier)
    pruner = InboxPruner(dsn, InboxRetention(WINDOW, batch_size=2, fenced_seconds=DAY))

    # Every row past the live window, the fence settled just now: only the live
    # epoch's rows go; the old epoch's, at or below its progress too, are history.
    decided_ago(dsn, 1, WINDOW + 60)
    decided_ago(dsn, 2, WINDOW + 60)
    assert pruner.prune_once() == {NEW: 3}
    assert positions(dsn, 1) == [1, 2, 3, 4, 5, 6, 8]
    assert positions(dsn, 2) == []

    # The period is over, but the late audit row at 8 was decided an hour ago: it
    # stays until it is as old as the period; everything else goes, in batches of 2.
    settled_ago(dsn, DAY + 60)
    decided_ago(dsn, 1, DAY + 60)
    decided_ago(dsn, 1, WINDOW, position=8)
    assert pruner.prune_once() == {OLD: 6}
    assert positions(dsn, 1) == [8]
    decided_ago(dsn, 1, DAY + 60, position=8)
    assert pruner.prune_once() == {OLD: 1}
    assert positions(dsn, 1) == []

    # The progress rows stay: a late copy at or below the old progress is still a
    # duplicate, and one above it is audited again (kept its own period).
    state = read_state(dsn)
    assert state.progress == {1: 6, 2: 3}
    again = applier.apply([partition.event(upsert(3, "i3", 1)), partition.event(upsert(9, "x", 1))])
    assert (again.duplicates, again.ignored, again.applied) == (1, 1, 0)
    assert positions(dsn, 1) == [9]
    assert pruner.prune_once() == {}
    assert positions(dsn, 1) == [9]


def test_a_parked_old_epoch_event_goes_with_its_parking_rows(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    """A parked row of a superseded epoch (parked after the settlement by an applier
    whose epoch was still the old one) leaves with its inbox row after the period."""
    dsn = clean_db.product_dsn
    superseded_history(clean_db, applier)
    set_epoch(clean_db.control_dsn, 1)  # an applier that still sees epoch 1
    parked = upsert(10, "p", 1, on("absent", 1))
    assert applier.apply([Partition(1).event(parked)]).parked == 1
    set_epoch(clean_db.control_dsn, 2)
    settled_ago(dsn, DAY + 60)
    decided_ago(dsn, 1, DAY + 60)
    pruner = InboxPruner(dsn, InboxRetention(WINDOW, batch_size=100, fenced_seconds=DAY))
    assert pruner.prune_once() == {OLD: 8}
    with psycopg.connect(dsn) as conn:
        left = conn.execute(
            "SELECT (SELECT count(*) FROM parked_event WHERE tenant_id = %(t)s),"
            " (SELECT count(*) FROM parked_dependency WHERE tenant_id = %(t)s)",
            {"t": TENANT},
        ).fetchone()
    assert left == (0, 0)


def _pruner_waiting(dsn: str) -> int:
    """The pid of the old-epoch prune statement once it waits on a row lock."""
    deadline = time.monotonic() + 30
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE 'WITH candidate AS%%' AND datname = current_database()"
            ).fetchone()
            if row:
                return int(row[0])
            assert time.monotonic() < deadline, "the prune statement never waited"
            time.sleep(0.01)


def test_a_batch_killed_mid_way_leaves_the_rest_for_the_next_pass(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    dsn = clean_db.product_dsn
    superseded_history(clean_db, applier)
    settled_ago(dsn, DAY + 60)
    decided_ago(dsn, 1, DAY + 60)
    pruner = InboxPruner(dsn, InboxRetention(WINDOW, batch_size=2, fenced_seconds=DAY))
    # Another session holds the row at 4: the second batch (3, 4) waits on it, and
    # its connection is killed there.
    blocker = psycopg.connect(dsn)
    blocker.execute(
        "SELECT 1 FROM inbox WHERE tenant_id = %s AND history_epoch = 1 AND position = 4"
        " FOR UPDATE",
        (TENANT,),
    )
    failures: list[BaseException] = []

    def prune() -> None:
        try:
            pruner.prune_once()
        except psycopg.Error as exc:
            failures.append(exc)

    thread = threading.Thread(target=prune)
    thread.start()
    try:
        pid = _pruner_waiting(dsn)
        sql(dsn, "SELECT pg_terminate_backend(%s)", pid)
        thread.join(30)
    finally:
        blocker.rollback()
        blocker.close()
    assert not thread.is_alive() and len(failures) == 1
    # The first batch committed; the killed one deleted nothing.
    assert positions(dsn, 1) == [3, 4, 5, 6, 8]
    assert pruner.prune_once() == {OLD: 5}
    assert positions(dsn, 1) == []


def test_the_gap_closer_leaves_a_superseded_stream_alone(
    clean_db: DatabaseSettings, resolver_api: RunningApi
) -> None:
    """An old epoch the resolver has pruned after its period is never asked for:
    asking would only be refused (the events are gone) and flag a rebuild of a dead
    stream."""
    epochs = EpochSource(clean_db.control_dsn, ttl_seconds=0)
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=1, open=True)
    for i in range(3):
        with UnitOfWork(pool, epochs, CODEC) as uow:
            accept(uow, "t1", "c1", ItemChange("t1", "c1", f"p{i}", "lamp", f"lamp {i}"))
    pool.close()
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        rows = conn.execute("SELECT position, key, value FROM outbox ORDER BY position").fetchall()
    assert len(rows) == 6  # a decision and an item per write
    applier = Applier(clean_db.product_dsn, epochs, CODEC)
    applier.apply([RawMessage("events", 0, p, bytes(k), bytes(v)) for p, k, v in rows[:2]])
    old = ("t1", "c1", 1)
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        conn.execute("UPDATE history_epoch SET epoch = 2 WHERE tenant_id = 't1'")
    with psycopg.connect(clean_db.resolver_owner_dsn) as conn:
        assert len(fence_older_epochs(conn, "t1", "c1", 2)) == 1
        conn.commit()
    with psycopg.connect(clean_db.product_dsn) as conn:
        settle_old_epochs(conn, DEFAULT_CONSUMER, "t1", "c1", 2)
        conn.commit()
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        pruned = prune_stream(conn, StreamId(*old), RetentionPolicy(0, 1000, fenced_seconds=0))
    assert pruned.pruned_through > 2
    NEEDS_REBUILD.labels(*map(str, old)).set(0)

    client = ResolverClient(resolver_api.url, resolver_api.token)
    closer = GapCloser(clean_db.product_dsn, client, applier, DEFAULT_CONSUMER, threshold_s=0)
    assert closer.candidates() == {}
    assert closer.close_once() == {}
    labels = {"tenant": "t1", "catalog": "c1", "epoch": "1"}
    assert REGISTRY.get_sample_value("gapless_consumer_needs_rebuild", labels) == 0
    client.close()
    applier.close()
    epochs.close()
