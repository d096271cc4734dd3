"""Pausing a catalog (``db.control.pauses``) against real PostgreSQL and Kafka: a process's
watch holds the pause and acknowledges it only once the work it had started on the
catalog ended; a paused catalog's writes are refused with nothing written, the
relay leaves its rows unpublished, the agents leave its current-epoch events for
later (an old epoch's are still judged), and the read API answers that it is being
restored (``tests/integration/processors/serving/test_paused.py``); after the resume
everything goes on."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.control import pauses
from db.control.epochs import EpochSource, ensure_epoch
from db.control.pauses import PauseWatch
from db.exceptions import StreamPaused
from db.resolver.outbox import published_position
from db.resolver.retention import committed_position
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from processors.applier.batch import Applier
from producers.relay.publisher import Publisher
from producers.relay.relay import Relay
from producers.resolver.catalog_items import ItemChange
from schemas.codec import CODEC
from schemas.ids import StreamId
from schemas.settings import KafkaSettings
from tests.fixtures.decisions import accept
from tests.fixtures.waits import wait_for
from tests.integration.processors.applier.test_applier_faults import Partition, cut_over, upsert

TENANT, CATALOG = "applier-faults", "c1"  # the tenant the applier helpers write
STREAM = StreamId(TENANT, CATALOG, 1)


@pytest.fixture()
def watch(clean_db: DatabaseSettings) -> Iterator[PauseWatch]:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, TENANT, CATALOG)
    made = PauseWatch(clean_db.control_dsn, "test", poll_seconds=0.2, drain_seconds=30)
    yield made.start()
    made.stop()


def _pause(settings: DatabaseSettings) -> uuid.UUID:
    with psycopg.connect(settings.control_dsn, autocommit=True) as conn:
        pause, opened = pauses.open_pause(conn, TENANT, CATALOG, "ops", "restore")
    assert opened
    return pause.pause_id


def _resume(settings: DatabaseSettings) -> None:
    with psycopg.connect(settings.control_dsn, autocommit=True) as conn:
        assert pauses.resume(conn, TENANT, CATALOG, "ops") is not None


def _acked(settings: DatabaseSettings, pause_id: uuid.UUID, state: str = "paused") -> bool:
    with psycopg.connect(settings.control_dsn, autocommit=True) as conn:
        return all(h.acknowledged for h in pauses.holders(conn, pause_id, state))


def test_a_pause_is_acknowledged_only_after_the_work_in_flight_ends(
    clean_db: DatabaseSettings, watch: PauseWatch
) -> None:
    with watch.working([(TENANT, CATALOG)]):  # a write under way when the pause comes
        pause_id = _pause(clean_db)
        watch.notify()
        wait_for(lambda: watch.paused(TENANT, CATALOG) is not None, "the pause held", 10)
        with pytest.raises(StreamPaused) as refused, watch.working([(TENANT, CATALOG)]):
            pass
        assert refused.value.code == "STREAM_PAUSED" and refused.value.pause_id == pause_id
        with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
            held = pauses.holders(conn, pause_id)
        assert [(h.instance_id, h.acknowledged) for h in held] == [(watch.instance_id, False)]
    wait_for(lambda: _acked(clean_db, pause_id), "the acknowledgement", 10)
    # Another catalog is not paused; asking again for the same pause changes nothing.
    with watch.working([(TENANT, "other")]):
        pass
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        again, opened = pauses.open_pause(conn, TENANT, CATALOG, "someone", "again")
    assert (again.pause_id, opened) == (pause_id, False)
    _resume(clean_db)
    watch.notify()
    wait_for(lambda: watch.paused(TENANT, CATALOG) is None, "the resume held", 10)
    wait_for(lambda: _acked(clean_db, pause_id, "resumed"), "the resume acknowledged", 10)


def test_a_paused_catalog_takes_no_write_and_publishes_nothing_until_resumed(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, topic: str, watch: PauseWatch
) -> None:
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    relay = Relay(
        clean_db.resolver_dsn, Publisher(kafka_settings.kafka_bootstrap, topic), pauses=watch
    )

    def write(item: str) -> None:
        with UnitOfWork(pool, epochs, CODEC, watch) as uow:
            accept(uow, TENANT, CATALOG, ItemChange(TENANT, CATALOG, item, "lamp", "lamp"))

    def positions() -> tuple[int, int]:
        with psycopg.connect(clean_db.resolver_dsn) as conn:
            return committed_position(conn, STREAM), published_position(conn, STREAM)

    try:
        write("i1")
        assert positions() == (2, 0)  # the decision and the item, not yet published
        pause_id = _pause(clean_db)
        watch.refresh()
        assert _acked(clean_db, pause_id)
        with pytest.raises(StreamPaused):
            write("i2")
        assert relay.run_once() == 0
        assert positions() == (2, 0)  # nothing written, nothing published
        _resume(clean_db)
        watch.refresh()
        write("i2")
        assert relay.run_once() == 4
        assert positions() == (4, 4)
    finally:
        pool.close()
        epochs.close()


def test_the_agents_leave_a_paused_catalogs_events_and_still_judge_an_old_epochs(
    clean_db: DatabaseSettings, watch: PauseWatch
) -> None:
    epochs = EpochSource(clean_db.control_dsn)
    applier = Applier(clean_db.product_dsn, epochs, CODEC, pauses=watch)
    partition = Partition()

    def outcome(event_id: uuid.UUID) -> tuple[str, ...] | None:
        with psycopg.connect(clean_db.product_dsn) as conn:
            return conn.execute(
                "SELECT outcome FROM inbox WHERE event_id = %s", (event_id,)
            ).fetchone()

    _pause(clean_db)
    watch.refresh()
    first = upsert(1, "i1", 1)
    result = applier.apply([partition.event(first)])
    assert (result.deferred, result.applied) == (1, 0)
    assert outcome(first.event_id) is None  # kept aside, handed back after the resume
    # The restore issues epoch 2: epoch 1's events are judged, paused or not.
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE history_epoch SET epoch = 2 WHERE tenant_id = %s AND catalog_id = %s",
            (TENANT, CATALOG),
        )
    stale = upsert(2, "i2", 1)
    result = applier.apply([partition.event(stale)])
    assert (result.deferred, result.ignored) == (0, 1)
    assert outcome(stale.event_id) == ("ignored_old_epoch",)
    _resume(clean_db)
    watch.refresh()
    cut_over(clean_db.product_dsn, 2)  # the fence's rebuild: epoch 2 is released
    fresh = upsert(1, "i3", 1, epoch=2)
    assert applier.apply([partition.event(fresh)]).applied == 1
    applier.close()
    epochs.close()
