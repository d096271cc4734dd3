"""Poison repair never dead-ends, against real PostgreSQL (and the resolver's HTTP API
for the gap closer): what waited on a skipped event gets an outcome of its own, a
released parked event that fails is the one quarantined, an undecodable message can
be skipped for good, and parked events have their own list, retry and skip."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource, ensure_epoch
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from processors.applier.batch import DEFAULT_CONSUMER, Applier
from processors.applier.exceptions import ParkedEventNotFound, SkipReasonRequired
from processors.applier.messages import RawMessage
from processors.applier.parked_repair import list_parked
from processors.applier.parked_repair import retry as retry_parked
from processors.applier.parked_repair import skip as skip_parked
from processors.applier.repair import list_entries, retry, skip, skip_entry
from processors.gaps import GapCloser, retained_topic
from processors.resolver_client import ResolverClient
from producers.resolver.catalog_items import ItemChange
from schemas.codec import CODEC, MAGIC
from tests.fixtures.decisions import accept
from tests.fixtures.resolver_api import RunningApi
from tests.integration.processors.applier.test_applier_faults import (
    TENANT,
    Partition,
    on,
    read_state,
    upsert,
)


@pytest.fixture()
def applier(clean_db: DatabaseSettings) -> Iterator[Applier]:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, TENANT, "c1")
    epochs = EpochSource(clean_db.control_dsn, ttl_seconds=0)
    applier = Applier(clean_db.product_dsn, epochs, CODEC)
    yield applier
    applier.close()
    epochs.close()


def open_entries(dsn: str) -> list[tuple[str, uuid.UUID | None, int | None]]:
    with psycopg.connect(dsn) as conn:
        return [(e.error_code, e.event_id, e.position) for e in list_entries(conn)]


def test_an_event_arriving_after_what_it_waits_on_was_skipped_is_set_aside_not_parked(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    partition = Partition()
    applier.apply([partition.event(upsert(1, "parent", 1, title="bad\x00title"))])
    with psycopg.connect(clean_db.product_dsn) as conn:
        [parent] = list_entries(conn)
    assert skip(clean_db.product_dsn, parent.id, "unfixable at source", "tester") == 1

    child = upsert(2, "child", 1, parent=on("parent", 1))
    late = partition.event(child)
    result = applier.apply([late])

    assert (result.quarantined, result.parked) == (1, 0)
    state = read_state(clean_db.product_dsn)
    assert state.parked == set()
    assert state.inbox[child.event_id] == "quarantined"
    assert open_entries(clean_db.product_dsn) == [("DEPENDENCY_SKIPPED", child.event_id, 2)]
    again = applier.apply([late])  # a redelivered copy is a duplicate
    assert (again.duplicates, again.quarantined, again.parked) == (1, 0, 0)

    with psycopg.connect(clean_db.product_dsn) as conn:
        [entry] = list_entries(conn)
    assert retry(clean_db.product_dsn, applier, entry.id, "tester") is False
    assert open_entries(clean_db.product_dsn) == [("DEPENDENCY_SKIPPED", child.event_id, 2)]

    # The parent's next revision arrives and applies; now the child can too.
    applier.apply([partition.event(upsert(3, "parent", 2, title="fixed"))])
    assert read_state(clean_db.product_dsn).progress == {1: 1}  # the child holds it
    assert retry(clean_db.product_dsn, applier, entry.id, "tester") is True
    state = read_state(clean_db.product_dsn)
    assert state.progress == {1: 3}
    assert state.inbox[child.event_id] == "applied"
    assert state.items[("child", 1)][2] == 1
    assert open_entries(clean_db.product_dsn) == []
    with psycopg.connect(clean_db.product_dsn) as conn:
        [retried] = list_entries(conn, status="retried")
    assert (retried.id, retried.resolution) == (entry.id, "retried by tester")


def test_a_released_parked_event_that_fails_is_quarantined_not_the_event_that_released_it(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    partition = Partition()
    parent = upsert(1, "parent", 1)
    child = upsert(2, "child", 1, parent=on("parent", 1), title="bad\x00title")
    grandchild = upsert(3, "grandchild", 1, parent=on("child", 1))
    parked = [partition.event(child), partition.event(grandchild)]
    assert applier.apply(parked).parked == 2

    result = applier.apply([partition.event(parent)])

    assert (result.applied, result.quarantined) == (1, 1)
    state = read_state(clean_db.product_dsn)
    assert state.inbox[parent.event_id] == "applied"
    assert ("parent", 1) in state.items and ("child", 1) not in state.items
    assert state.progress == {1: 1}
    with psycopg.connect(clean_db.product_dsn) as conn:
        [entry] = list_entries(conn)
    assert entry.error_code.startswith("APPLY_FAILED")
    assert (entry.event_id, entry.position, entry.offset) == (child.event_id, 2, 0)
    assert state.parked == {grandchild.event_id}  # waits on the child, as it should

    assert retry(clean_db.product_dsn, applier, entry.id, "tester") is False
    done = skip_entry(clean_db.product_dsn, entry.id, "title unfixable", "tester")
    assert done.progress == 2
    [(grandchild_id, grandchild_entry)] = done.set_aside.items()
    assert grandchild_id == grandchild.event_id
    assert open_entries(clean_db.product_dsn) == [("DEPENDENCY_SKIPPED", grandchild.event_id, 3)]
    assert skip(clean_db.product_dsn, grandchild_entry, "its parent is gone", "tester") == 3
    assert read_state(clean_db.product_dsn).parked == set()


def test_parked_events_are_listed_with_what_they_wait_on_and_retried_or_skipped(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    partition = Partition()
    first = upsert(2, "a-child", 1, parent=on("a", 1))
    second = upsert(3, "b-child", 1, parent=on("b", 1))
    grandchild = upsert(4, "b-grandchild", 1, parent=on("b-child", 1))
    applier.apply([partition.event(e) for e in (first, second, grandchild)])

    with psycopg.connect(clean_db.product_dsn) as conn:
        listed = list_parked(conn, DEFAULT_CONSUMER)
        assert list_parked(conn, DEFAULT_CONSUMER, older_than=timedelta(hours=1)) == []
        assert list_parked(conn, DEFAULT_CONSUMER, stream=("nobody", "c1", 1)) == []
    assert [(p.event_id, p.position, p.offset) for p in listed] == [
        (first.event_id, 2, 0),
        (second.event_id, 3, 1),
        (grandchild.event_id, 4, 2),
    ]
    assert [str(d) for d in listed[0].waits_on] == ["catalog_item a@1 (never applied)"]
    assert listed[0].event_type == "catalog_item.upserted"

    # Still waiting: a retry says so and changes nothing.
    assert retry_parked(applier, [first.event_id]) == {first.event_id: None}
    # "a" is applied by a path that released nothing (as a bug since fixed would: its
    # dependants' rows are out of sight meanwhile); the retry releases the event.
    with psycopg.connect(clean_db.product_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE parked_dependency RENAME TO parked_dependency_hidden")
        conn.execute("CREATE TABLE parked_dependency (LIKE parked_dependency_hidden)")
        try:
            applier.apply([partition.event(upsert(1, "a", 1))])
        finally:
            conn.execute("DROP TABLE parked_dependency")
            conn.execute("ALTER TABLE parked_dependency_hidden RENAME TO parked_dependency")
    applier.close()  # its prepared statements named the table that was swapped
    with psycopg.connect(clean_db.product_dsn) as conn:
        assert first.event_id in {p.event_id for p in list_parked(conn, DEFAULT_CONSUMER)}
    assert retry_parked(applier, [first.event_id]) == {first.event_id: "applied"}
    assert read_state(clean_db.product_dsn).progress == {1: 2}
    with pytest.raises(ParkedEventNotFound):
        retry_parked(applier, [first.event_id])

    # "b" never comes: the operator gives b-child up, and its own dependant is set aside.
    with pytest.raises(SkipReasonRequired):
        skip_parked(clean_db.product_dsn, DEFAULT_CONSUMER, second.event_id, " ", "tester")
    entry_id, done = skip_parked(
        clean_db.product_dsn, DEFAULT_CONSUMER, second.event_id, "b was withdrawn", "tester"
    )
    assert done.progress == 3
    assert list(done.set_aside) == [grandchild.event_id]
    with psycopg.connect(clean_db.product_dsn) as conn:
        [skipped] = [e for e in list_entries(conn, status="skipped") if e.id == entry_id]
        assert list_parked(conn, DEFAULT_CONSUMER) == []
    assert (skipped.error_code, skipped.event_id) == ("DEPENDENCY_NOT_APPLIED", second.event_id)
    assert skipped.resolution == "skipped by tester: b was withdrawn"
    assert "catalog_item b@1" in skipped.error_detail
    assert open_entries(clean_db.product_dsn) == [("DEPENDENCY_SKIPPED", grandchild.event_id, 4)]
    with pytest.raises(ParkedEventNotFound):
        skip_parked(clean_db.product_dsn, DEFAULT_CONSUMER, second.event_id, "again", "tester")


# Undecodable messages and the gap closer.

STREAM = ("t1", "c1", 1)


def write_items(settings: DatabaseSettings, tenant: str = "t1") -> list[RawMessage]:
    """Three decisions, each a decision event, a product and a variant that depends on
    the product: positions 1 … 9 (products at 2, 5, 8)."""
    pool = ConnectionPool(settings.resolver_dsn, min_size=1, max_size=1, open=True)
    epochs = EpochSource(settings.control_dsn)
    for i in range(3):
        product = ItemChange(tenant, "c1", f"p{i}", "lamp", f"lamp {i}")
        variant = ItemChange(tenant, "c1", f"p{i}-v", "lamp", "v", parent_item_id=f"p{i}")
        with UnitOfWork(pool, epochs, CODEC) as uow:
            accept(uow, tenant, "c1", product, variant)
    pool.close()
    epochs.close()
    with psycopg.connect(settings.resolver_dsn) as conn:
        rows = conn.execute(
            "SELECT position, key, value FROM outbox WHERE tenant_id = %s ORDER BY position",
            (tenant,),
        ).fetchall()
    return [RawMessage("events", 0, p - 1, bytes(k), bytes(v)) for p, k, v in rows]


def corrupt(settings: DatabaseSettings, position: int) -> bytes:
    """Make the resolver's stored message at ``position`` name an unknown writer schema."""
    with psycopg.connect(settings.resolver_owner_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT value FROM outbox WHERE position = %s ORDER BY tenant_id", (position,)
        ).fetchall()
        bad = MAGIC + bytes(8) + bytes(rows[0][0])[10:]  # every stream's, alike
        conn.execute("UPDATE outbox SET value = %s WHERE position = %s", (bad, position))
    return bad


def stream_progress(settings: DatabaseSettings) -> int:
    with psycopg.connect(settings.product_dsn) as conn:
        row = conn.execute("SELECT position FROM stream_progress").fetchone()
    return int(row[0]) if row else 0


@pytest.fixture()
def closer(clean_db: DatabaseSettings, resolver_api: RunningApi) -> Iterator[GapCloser]:
    applier = Applier(clean_db.product_dsn, EpochSource(clean_db.control_dsn), CODEC)
    client = ResolverClient(resolver_api.url, resolver_api.token)
    yield GapCloser(clean_db.product_dsn, client, applier, DEFAULT_CONSUMER, threshold_s=0)
    applier.close()
    client.close()


def test_a_skipped_undecodable_message_is_never_quarantined_again_and_progress_passes_it(
    clean_db: DatabaseSettings, closer: GapCloser
) -> None:
    messages = write_items(clean_db)
    bad = corrupt(clean_db, 8)  # p2, which p2-v (9) depends on
    delivered = [m if m.offset != 7 else RawMessage("events", 0, 7, m.key, bad) for m in messages]
    assert closer.applier.apply(delivered).quarantined == 1
    assert stream_progress(clean_db) == 7
    with psycopg.connect(clean_db.product_dsn) as conn:
        [entry] = list_entries(conn)
    assert (entry.error_code, entry.position) == ("UNKNOWN_SCHEMA", None)

    assert skip(clean_db.product_dsn, entry.id, "a writer schema we will never read", "op") is None
    closer.close_once()  # fetches position 8's stored bytes: the same message

    assert stream_progress(clean_db) == 8
    with psycopg.connect(clean_db.product_dsn) as conn:
        skipped = list_entries(conn, status="skipped")
        assert list_parked(conn, DEFAULT_CONSUMER) == []
    assert [(e.topic, e.position) for e in skipped] == [
        ("events", None),
        (retained_topic(STREAM), 8),
    ]
    assert skipped[1].resolution == (
        f"skipped: the same message as entry {entry.id}, "
        "skipped by op: a writer schema we will never read"
    )
    # p2-v waited on p2, which will not come: set aside with what it waited on.
    [(code, _, position)] = open_entries(clean_db.product_dsn)
    assert (code, position) == ("DEPENDENCY_NOT_APPLIED", 9)

    with psycopg.connect(clean_db.product_dsn) as conn:
        [dependant] = list_entries(conn)
    assert skip(clean_db.product_dsn, dependant.id, "its product is unreadable", "op") == 9
    assert closer.close_once() == {}  # nothing after 9: nothing fetched or quarantined
    assert open_entries(clean_db.product_dsn) == []


def test_an_undecodable_retained_copy_is_quarantined_with_its_position_and_skipped(
    clean_db: DatabaseSettings, closer: GapCloser
) -> None:
    messages = write_items(clean_db)
    corrupt(clean_db, 5)  # p1: lost from Kafka, and unreadable at the resolver
    closer.applier.apply([m for m in messages if m.offset != 4])
    assert stream_progress(clean_db) == 4
    closer.close_once()
    with psycopg.connect(clean_db.product_dsn) as conn:
        [entry] = list_entries(conn)
    assert (entry.topic, entry.stream, entry.position) == (retained_topic(STREAM), STREAM, 5)

    done = skip_entry(clean_db.product_dsn, entry.id, "unreadable at the source", "op")

    assert done.progress == 5
    [(code, _, position)] = open_entries(clean_db.product_dsn)
    assert (code, position) == ("DEPENDENCY_NOT_APPLIED", 6)  # p1-v
    closer.close_once()  # after 5: p1-v's copy is a duplicate, the rest applied
    assert len(open_entries(clean_db.product_dsn)) == 1
    assert stream_progress(clean_db) == 5


def test_undecodable_retained_copies_of_two_streams_at_one_position_are_both_quarantined(
    clean_db: DatabaseSettings, closer: GapCloser
) -> None:
    """Retained copies were recorded under one origin for every stream, so the second
    stream's copy at the same position collided with the first's and was dropped."""
    first, second = write_items(clean_db, "t1"), write_items(clean_db, "t2")
    corrupt(clean_db, 5)  # position 5 of both streams
    closer.applier.apply([m for m in first + second if m.offset != 4])
    closer.close_once()
    with psycopg.connect(clean_db.product_dsn) as conn:
        entries = list_entries(conn)
    assert sorted((e.stream, e.position, e.topic) for e in entries) == [
        (("t1", "c1", 1), 5, retained_topic(("t1", "c1", 1))),
        (("t2", "c1", 1), 5, retained_topic(("t2", "c1", 1))),
    ]
