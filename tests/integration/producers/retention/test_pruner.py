"""The pruner against real PostgreSQL: only a contiguous prefix of published rows
older than the retention age, never past a consumer's progress or a live lease's
pin, in bounded batches, and no holder is ever removed on its own."""

from __future__ import annotations

import psycopg
import pytest

from db.settings import DatabaseSettings
from producers.retention import consumers, leases
from producers.retention.pruner import (
    RetentionPolicy,
    StreamPruned,
    prune_all,
    prune_batch,
    prune_stream,
)
from producers.retention.report import stream_report
from schemas.ids import StreamId
from tests.integration.producers.retention.streams import (
    age,
    expire_lease,
    ready_stream,
    retained_positions,
)

HOUR = RetentionPolicy(age_seconds=600, batch_size=1000)


def run(
    settings: DatabaseSettings, stream: StreamId, policy: RetentionPolicy = HOUR
) -> StreamPruned:
    with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
        return prune_stream(conn, stream, policy)


def conn_of(settings: DatabaseSettings) -> psycopg.Connection:
    return psycopg.connect(settings.resolver_dsn, autocommit=True)


def test_only_published_rows_older_than_the_age_are_pruned(clean_db: DatabaseSettings) -> None:
    stream = ready_stream(clean_db, n=30, published=20, old=10)
    result = run(clean_db, stream)
    assert (result.deleted, result.pruned_through, result.limited_by) == (10, 10, "retention age")
    assert retained_positions(clean_db, stream) == list(range(11, 31))

    age(clean_db, stream, 30, 3600)
    result = run(clean_db, stream)
    assert (result.deleted, result.pruned_through, result.limited_by) == (10, 20, "publication")
    assert retained_positions(clean_db, stream) == list(range(21, 31))


def test_a_young_row_stops_the_prefix_even_with_old_rows_after_it(
    clean_db: DatabaseSettings,
) -> None:
    stream = ready_stream(clean_db, n=10, published=10, old=10)
    with conn_of(clean_db) as conn:
        conn.execute("UPDATE outbox SET committed_at = now() WHERE position = 5")
    assert run(clean_db, stream).pruned_through == 4
    assert retained_positions(clean_db, stream) == list(range(5, 11))


def test_pruning_never_passes_a_consumer_or_a_live_lease(clean_db: DatabaseSettings) -> None:
    stream = ready_stream(clean_db, n=12, published=12, old=12)
    with conn_of(clean_db) as conn:
        lease = leases.create(conn, stream, "rebuild", 600)  # pinned at 0
        consumers.report(conn, stream, "app", 7)
        assert run(clean_db, stream).pruned_through == 0
        leases.advance(conn, lease.lease_id, 5)
        result = run(clean_db, stream)
        assert result.pruned_through == 5
        assert result.limited_by.startswith(f"lease '{lease.lease_id} (rebuild)'")
        leases.release(conn, lease.lease_id)
        assert run(clean_db, stream).pruned_through == 7
        consumers.report(conn, stream, "app", 12)
    assert run(clean_db, stream).pruned_through == 12
    assert retained_positions(clean_db, stream) == []


def test_a_consumer_that_never_reported_holds_the_floor(clean_db: DatabaseSettings) -> None:
    stream = ready_stream(clean_db, n=10, published=10, old=10)
    with conn_of(clean_db) as conn:
        consumers.report(conn, stream, "app", 6)
        assert run(clean_db, stream).pruned_through == 6
        late = consumers.register(conn, stream, "late")
    assert (late.pruned_through, late.reported_position) == (6, None)
    result = run(clean_db, stream)
    assert (result.deleted, result.limited_by) == (0, "consumer 'late' at 0")
    assert retained_positions(clean_db, stream) == list(range(7, 11))


def test_a_lagging_consumer_blocks_pruning_is_named_and_is_never_dropped(
    clean_db: DatabaseSettings,
) -> None:
    stream = ready_stream(clean_db, n=20, published=20, old=20)
    with conn_of(clean_db) as conn:
        consumers.report(conn, stream, "fast", 20)
        consumers.report(conn, stream, "slow", 2)
        for _ in range(3):
            assert run(clean_db, stream).pruned_through == 2
        (state,) = stream_report(conn, stream)
    assert state.held_by is not None
    assert (state.held_by.kind, state.held_by.name, state.floor) == ("consumer", "slow", 2)
    assert state.held_back == 18
    assert state.blocker is not None and "'slow'" in state.blocker
    assert {c.consumer_id: c.lag for c in state.consumers} == {"fast": 0, "slow": 18}

    with conn_of(clean_db) as conn:
        consumers.deregister(conn, stream, "slow")
    assert run(clean_db, stream).pruned_through == 20


def test_an_expired_lease_pins_nothing_but_stays_listed(clean_db: DatabaseSettings) -> None:
    stream = ready_stream(clean_db, n=8, published=8, old=8)
    with conn_of(clean_db) as conn:
        lease = leases.create(conn, stream, "rebuild", 600)
        assert run(clean_db, stream).pruned_through == 0
        expire_lease(clean_db, lease.lease_id)
        assert run(clean_db, stream).pruned_through == 8
        (state,) = stream_report(conn, stream)
    (listed,) = state.leases
    assert listed.lease_id == lease.lease_id and listed.expired
    assert listed.seconds_to_expiry < 0


def test_deletes_are_batched(clean_db: DatabaseSettings) -> None:
    stream = ready_stream(clean_db, n=10, published=10, old=10)
    small = RetentionPolicy(age_seconds=600, batch_size=3)
    with conn_of(clean_db) as conn:
        assert prune_batch(conn, stream, small) == (3, 3, "batch size")
        assert retained_positions(clean_db, stream) == list(range(4, 11))
    result = run(clean_db, stream, small)
    assert (result.deleted, result.batches, result.pruned_through) == (7, 3, 10)


def test_a_pass_covers_every_stream(clean_db: DatabaseSettings) -> None:
    a = ready_stream(clean_db, n=5, published=5, old=5, catalog="a")
    b = ready_stream(clean_db, n=6, published=3, old=6, catalog="b")
    with conn_of(clean_db) as conn:
        results = {r.stream: r for r in prune_all(conn, HOUR)}
        assert (results[a].pruned_through, results[b].pruned_through) == (5, 3)
        assert prune_all(conn, HOUR) == []  # nothing published is left to prune


def test_the_pruner_refuses_to_run_inside_a_transaction(clean_db: DatabaseSettings) -> None:
    stream = ready_stream(clean_db, n=2, published=2, old=2)
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        conn.execute("SELECT 1")
        with pytest.raises(RuntimeError, match="outside any transaction"):
            prune_stream(conn, stream, HOUR)
