"""Fencing holds against a writer and a relay that still hold the old epoch.

The control database issues epoch 2 (a restore); the fence then marks the old
epoch's stream in the resolver database. A writer mid-transaction with the old
stream's cursor lock commits before the fence takes effect (the fence waits for
it); a writer that still has epoch 1 cached finds the mark, writes nothing to the
old stream and goes to epoch 2 from position 1; a relay batch in flight finishes
before the fence, and no old-epoch row is published after it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource, ensure_epoch
from db.exceptions import StreamFenced
from db.resolver.fencing import Fenced, fence_older_epochs
from db.settings import DatabaseSettings
from db.stream_writer import lock_cursor
from db.unit_of_work import UnitOfWork
from producers.relay.publisher import Publisher
from producers.relay.relay import Relay
from producers.resolver.catalog_items import ItemChange
from schemas.codec import CODEC
from schemas.ids import StreamId
from schemas.settings import KafkaSettings
from tests.fixtures.decisions import accept

TENANT, CATALOG = "t-fence", "c1"
OLD, NEW = StreamId(TENANT, CATALOG, 1), StreamId(TENANT, CATALOG, 2)


@pytest.fixture()
def pool(clean_db: DatabaseSettings) -> Iterator[ConnectionPool]:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, TENANT, CATALOG)
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=4, open=True)
    yield pool
    pool.close()


def _write(pool: ConnectionPool, epochs: EpochSource, n: int, tag: str) -> list[StreamId]:
    streams = []
    for i in range(n):
        with UnitOfWork(pool, epochs, CODEC) as uow:
            accept(uow, TENANT, CATALOG, ItemChange(TENANT, CATALOG, f"{tag}{i}", "lamp", tag))
            streams.append(uow.stream(TENANT, CATALOG).stream)
    return streams


def _issue_epoch_2(settings: DatabaseSettings) -> None:
    with psycopg.connect(settings.control_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE history_epoch SET epoch = 2 WHERE tenant_id = %s AND catalog_id = %s",
            (TENANT, CATALOG),
        )


def _waiting_on_a_lock(settings: DatabaseSettings) -> None:
    """Until some session of the resolver database waits on a lock (as the owner, who
    sees every session's wait)."""
    deadline = time.monotonic() + 30
    with psycopg.connect(settings.resolver_owner_dsn, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type IN ('Lock')"
                " AND datname = current_database()"
            ).fetchone()
            if row and row[0] > 0:
                return
            assert time.monotonic() < deadline, "the fence never waited"
            time.sleep(0.01)


def _fence(settings: DatabaseSettings, out: list[list[Fenced]]) -> None:
    with psycopg.connect(settings.resolver_owner_dsn) as conn:
        out.append(fence_older_epochs(conn, TENANT, CATALOG, 2))
        conn.commit()


def _positions(settings: DatabaseSettings, stream: StreamId) -> list[int]:
    with psycopg.connect(settings.resolver_dsn) as conn:
        rows = conn.execute(
            "SELECT position FROM outbox WHERE tenant_id = %s AND catalog_id = %s"
            " AND history_epoch = %s ORDER BY position",
            tuple(stream),
        ).fetchall()
    return [int(p) for (p,) in rows]


def test_writers_on_the_old_epoch_commit_before_the_fence_or_not_at_all(
    clean_db: DatabaseSettings, pool: ConnectionPool
) -> None:
    cached = EpochSource(clean_db.control_dsn, ttl_seconds=3600)  # holds epoch 1
    assert _write(pool, cached, 3, "a") == [OLD] * 3

    # A writer mid-transaction, holding the old stream's cursor lock.
    with UnitOfWork(pool, cached, CODEC) as holding:
        assert holding.stream(TENANT, CATALOG).stream == OLD
        _issue_epoch_2(clean_db)
        fenced: list[list[Fenced]] = []
        fence = threading.Thread(target=_fence, args=(clean_db, fenced))
        fence.start()
        _waiting_on_a_lock(clean_db)  # the fence waits for the writer's row lock
        assert not fenced
        # The writer goes on and commits (a decision: two events), before the fence.
        accept(holding, TENANT, CATALOG, ItemChange(TENANT, CATALOG, "mid", "lamp", "mid"))
    fence.join(30)
    assert fenced == [[Fenced(OLD, 8, 0)]]
    assert _positions(clean_db, OLD) == list(range(1, 9))

    # Epoch 1 still cached: the writer finds the fence and writes to epoch 2 from 1.
    assert _write(pool, cached, 2, "b") == [NEW, NEW]
    assert _positions(clean_db, OLD) == list(range(1, 9))
    assert _positions(clean_db, NEW) == [1, 2, 3, 4]
    # Nothing can take the old stream's cursor any more.
    with psycopg.connect(clean_db.resolver_dsn) as conn, pytest.raises(StreamFenced):
        lock_cursor(conn, OLD)
    # Fencing again changes nothing.
    again: list[list[Fenced]] = []
    _fence(clean_db, again)
    assert again == [[]]
    cached.close()


def test_a_relay_batch_in_flight_finishes_first_and_nothing_old_is_published_after(
    clean_db: DatabaseSettings,
    pool: ConnectionPool,
    kafka_settings: KafkaSettings,
    topic: str,
) -> None:
    epochs = EpochSource(clean_db.control_dsn)
    _write(pool, epochs, 6, "r")
    in_hand, release = threading.Event(), threading.Event()

    def hold(_stream: StreamId, _rows: object) -> None:
        in_hand.set()
        assert release.wait(30)

    publisher = Publisher(kafka_settings.kafka_bootstrap, topic)
    relay = Relay(clean_db.resolver_dsn, publisher, batch_size=4, after_publish=hold)
    first = threading.Thread(target=relay.run_once)
    first.start()
    assert in_hand.wait(30)  # four old-epoch rows sent, their position not yet recorded
    _issue_epoch_2(clean_db)
    fenced: list[list[Fenced]] = []
    fence = threading.Thread(target=_fence, args=(clean_db, fenced))
    fence.start()
    _waiting_on_a_lock(clean_db)  # the fence waits for the relay's claim
    assert not fenced
    release.set()
    first.join(30)
    fence.join(30)
    assert fenced == [[Fenced(OLD, 12, 4)]]  # the batch in flight was recorded first

    after = Relay(clean_db.resolver_dsn, publisher, batch_size=100)
    assert after.run_once() == 0  # rows 5-12 of epoch 1 are never published
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        row = conn.execute(
            "SELECT published_position FROM stream_publication WHERE history_epoch = 1"
        ).fetchone()
    assert row == (4,) and _positions(clean_db, OLD) == list(range(1, 13))  # kept as history
    _write(pool, EpochSource(clean_db.control_dsn), 1, "n")
    assert after.run_once() == 2  # the new epoch flows
    publisher.close()
    epochs.close()


def test_the_next_epoch_is_issued_once_with_who_and_why(clean_db: DatabaseSettings) -> None:
    from db.control.epochs import issue_next
    from db.exceptions import EpochNotIssued

    with psycopg.connect(clean_db.control_dsn) as conn:
        ensure_epoch(conn, TENANT, CATALOG)
        first = issue_next(conn, TENANT, CATALOG, 1, "op-ann", "restored from last night")
        again = issue_next(conn, TENANT, CATALOG, 1, "op-bob", "asked twice")
        conn.commit()
        with pytest.raises(EpochNotIssued):
            issue_next(conn, TENANT, CATALOG, 5, "op-ann", "no such history")
        conn.rollback()
        with pytest.raises(EpochNotIssued):
            issue_next(conn, "nobody", CATALOG, 1, "op-ann", "no such catalog")
        conn.rollback()
        log = conn.execute(
            "SELECT epoch, issued_by, superseded_epoch, reason FROM history_epoch_log"
            " WHERE tenant_id = %s ORDER BY epoch",
            (TENANT,),
        ).fetchall()
    assert (first.epoch, first.issued_now, again.epoch, again.issued_now) == (2, True, 2, False)
    assert log == [
        (1, "writer", None, "first use"),
        (2, "op-ann", 1, "restored from last night"),
    ]
