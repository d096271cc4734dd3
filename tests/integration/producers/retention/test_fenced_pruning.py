"""The pruner and an abandoned history epoch, against real PostgreSQL.

A fenced stream is kept whole for the fenced retention period from its fence (even
rows the live rule would have pruned), then pruned to the end of its history in
bounded batches whatever its consumers, standing consumers and leases say; the live
epoch's stream keeps the live rule; a batch killed mid-way leaves a consistent
stream that the next pass finishes. Time is the database clock: the fence is moved
into the past, nothing sleeps.
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from db.control.epochs import ensure_epoch
from db.exceptions import StreamFenced
from db.resolver.fencing import fence_older_epochs
from db.settings import DatabaseSettings
from db.stream_writer import lock_cursor
from producers.retention import consumers, leases
from producers.retention.pruner import RetentionPolicy, prune_all, prune_batch, prune_stream
from producers.retention.rules import FENCED_HISTORY, HISTORY_END
from schemas.ids import StreamId
from tests.integration.producers.retention.streams import (
    age,
    publish,
    retained_positions,
    write_events,
)

TENANT, CATALOG = "t1", "fc"
DAY = 86_400.0


def policy(batch_size: int = 1000, fenced_seconds: float = DAY) -> RetentionPolicy:
    return RetentionPolicy(age_seconds=600, batch_size=batch_size, fenced_seconds=fenced_seconds)


def conn_of(settings: DatabaseSettings) -> psycopg.Connection:
    return psycopg.connect(settings.resolver_dsn, autocommit=True)


def fenced_stream(
    settings: DatabaseSettings, n: int, published: int, holders: bool = True
) -> tuple[StreamId, StreamId]:
    """Epoch 1 with ``n`` events (published through ``published``, all an hour old) and
    a consumer past all that is published; with ``holders``, a standing consumer never
    registered on it and a live lease pinned at 0. Then epoch 2 issued and epoch 1
    fenced. Returns both streams."""
    old = write_events(settings, TENANT, CATALOG, n)
    assert old.history_epoch == 1
    publish(settings, old, published)
    age(settings, old, n, 3600)
    with conn_of(settings) as conn:
        consumers.report(conn, old, "app", published)
        if holders:
            consumers.declare_standing(conn, "standing", "test")
            leases.create(conn, old, "rebuild", 600)
    with psycopg.connect(settings.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, TENANT, CATALOG)
        conn.execute(
            "UPDATE history_epoch SET epoch = 2 WHERE tenant_id = %s AND catalog_id = %s",
            (TENANT, CATALOG),
        )
    with psycopg.connect(settings.resolver_owner_dsn) as conn:
        assert [f.stream for f in fence_older_epochs(conn, TENANT, CATALOG, 2)] == [old]
        conn.commit()
    return old, StreamId(TENANT, CATALOG, 2)


def fenced_ago(settings: DatabaseSettings, stream: StreamId, seconds: float) -> None:
    """Move the stream's fence ``seconds`` into the past (by the database clock)."""
    with psycopg.connect(settings.resolver_owner_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE stream_cursor SET fenced_at = clock_timestamp() - make_interval(secs => %s)"
            " WHERE tenant_id = %s AND catalog_id = %s AND history_epoch = %s",
            (seconds, *stream),
        )


def pruned_through(settings: DatabaseSettings, stream: StreamId) -> int:
    with conn_of(settings) as conn:
        row = conn.execute(
            "SELECT pruned_through FROM stream_retention"
            " WHERE tenant_id = %s AND catalog_id = %s AND history_epoch = %s",
            tuple(stream),
        ).fetchone()
    return int(row[0]) if row else 0


def records(settings: DatabaseSettings, stream: StreamId) -> tuple[int, int]:
    """How many consumer registrations and leases the stream has."""
    with conn_of(settings) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM stream_consumer WHERE tenant_id = %(t)s"
            "  AND catalog_id = %(c)s AND history_epoch = %(e)s),"
            " (SELECT count(*) FROM rebuild_lease WHERE tenant_id = %(t)s"
            "  AND catalog_id = %(c)s AND history_epoch = %(e)s)",
            {"t": stream.tenant_id, "c": stream.catalog_id, "e": stream.history_epoch},
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_a_fenced_stream_is_kept_whole_for_its_period_then_pruned_to_its_end(
    clean_db: DatabaseSettings,
) -> None:
    old, new = fenced_stream(clean_db, n=10, published=6)
    # The live epoch: five events, all published and old, its consumers at 2.
    assert write_events(clean_db, TENANT, CATALOG, 5) == new
    publish(clean_db, new, 5)
    age(clean_db, new, 5, 3600)
    with conn_of(clean_db) as conn:
        consumers.report(conn, new, "app", 2)
        consumers.report(conn, new, "standing", 5)

    # Inside the period: nothing of the old epoch goes, not even the six rows every
    # holder but the lease and the standing consumer has passed; the live rule runs.
    fenced_ago(clean_db, old, DAY - 60)
    with conn_of(clean_db) as conn:
        results = {r.stream: r for r in prune_all(conn, policy())}
        assert old not in results
        assert prune_batch(conn, old, policy()) == (0, 0, FENCED_HISTORY)
    assert retained_positions(clean_db, old) == list(range(1, 11))
    assert results[new].pruned_through == 2
    assert retained_positions(clean_db, new) == [3, 4, 5]

    # After it: every row goes, the four never published too, past the lease, the
    # standing consumer that never registered and the consumer that stopped at 6.
    fenced_ago(clean_db, old, DAY + 60)
    with conn_of(clean_db) as conn:
        results = {r.stream: r for r in prune_all(conn, policy(batch_size=4))}
    assert (results[old].deleted, results[old].batches) == (10, 3)
    assert (results[old].pruned_through, results[old].limited_by) == (10, HISTORY_END)
    assert retained_positions(clean_db, old) == []
    # The live epoch is untouched by it: the live rule still holds at its consumer.
    assert retained_positions(clean_db, new) == [3, 4, 5]
    assert pruned_through(clean_db, new) == 2
    # What remains of the old epoch: its retention row at the end of its history,
    # the registrations and the lease as records, and the fence that keeps writers out.
    assert pruned_through(clean_db, old) == 10
    assert records(clean_db, old) == (1, 1)
    with conn_of(clean_db) as conn:
        # Nothing of the old epoch is left to prune; the live one waits for 'app'.
        assert [r.stream for r in prune_all(conn, policy())] == [new]
        with pytest.raises(StreamFenced):
            lock_cursor(conn, old)


def test_inside_its_period_a_fenced_stream_keeps_what_the_live_rule_would_prune(
    clean_db: DatabaseSettings,
) -> None:
    old, _new = fenced_stream(clean_db, n=8, published=8, holders=False)
    with conn_of(clean_db) as conn:
        assert prune_all(conn, policy()) == []
        result = prune_stream(conn, old, policy())
    assert (result.deleted, result.limited_by) == (0, FENCED_HISTORY)
    assert retained_positions(clean_db, old) == list(range(1, 9))


def test_a_fenced_stream_is_pruned_in_bounded_batches(clean_db: DatabaseSettings) -> None:
    old, _new = fenced_stream(clean_db, n=10, published=10)
    fenced_ago(clean_db, old, 2 * DAY)
    small = policy(batch_size=3)
    with conn_of(clean_db) as conn:
        assert prune_batch(conn, old, small) == (3, 3, "batch size")
        assert retained_positions(clean_db, old) == list(range(4, 11))
        assert prune_batch(conn, old, small) == (3, 6, "batch size")
        result = prune_stream(conn, old, small)
    assert (result.deleted, result.batches, result.pruned_through) == (4, 2, 10)
    assert result.limited_by == HISTORY_END


def test_a_zero_period_prunes_a_fenced_stream_at_the_next_pass(
    clean_db: DatabaseSettings,
) -> None:
    old, _new = fenced_stream(clean_db, n=4, published=2)
    with conn_of(clean_db) as conn:
        assert prune_stream(conn, old, policy()).deleted == 0
        assert prune_stream(conn, old, policy(fenced_seconds=0)).pruned_through == 4
    assert retained_positions(clean_db, old) == []


def _backend_waits_on_a_lock(settings: DatabaseSettings, pid: int) -> None:
    deadline = time.monotonic() + 30
    with psycopg.connect(settings.resolver_owner_dsn, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
            if row and row[0] == "Lock":
                return
            assert time.monotonic() < deadline, "the prune batch never waited"
            time.sleep(0.01)


def test_a_batch_killed_mid_way_leaves_a_consistent_stream_the_next_pass_finishes(
    clean_db: DatabaseSettings,
) -> None:
    old, _new = fenced_stream(clean_db, n=10, published=8)
    fenced_ago(clean_db, old, 2 * DAY)
    small = policy(batch_size=4)
    # Another session holds row 6, so the second batch's DELETE has removed row 5
    # (uncommitted) and waits there; then its connection is killed.
    blocker = psycopg.connect(clean_db.resolver_owner_dsn)
    blocker.execute(
        "SELECT 1 FROM outbox WHERE tenant_id = %s AND catalog_id = %s AND history_epoch = %s"
        " AND position = 6 FOR UPDATE",
        tuple(old),
    )
    pruner = conn_of(clean_db)
    failures: list[BaseException] = []

    def prune() -> None:
        try:
            prune_stream(pruner, old, small)
        except psycopg.Error as exc:
            failures.append(exc)

    thread = threading.Thread(target=prune)
    thread.start()
    try:
        _backend_waits_on_a_lock(clean_db, pruner.info.backend_pid)
        with psycopg.connect(clean_db.resolver_owner_dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pruner.info.backend_pid,))
        thread.join(30)
    finally:
        blocker.rollback()
        blocker.close()
        pruner.close()
    assert not thread.is_alive() and len(failures) == 1
    # The first batch committed; the killed one left nothing: a consistent prefix.
    assert pruned_through(clean_db, old) == 4
    assert retained_positions(clean_db, old) == list(range(5, 11))
    with conn_of(clean_db) as conn:
        result = prune_stream(conn, old, small)
    assert (result.deleted, result.pruned_through) == (6, 10)
    assert retained_positions(clean_db, old) == []
