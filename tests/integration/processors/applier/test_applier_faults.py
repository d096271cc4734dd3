"""The applier under faults, against real PostgreSQL: crashes around COMMIT, malformed
messages, and events from another history epoch."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from db.control.epochs import EpochSource, ensure_epoch
from db.product import cutover
from db.settings import DatabaseSettings
from processors.applier.batch import DEFAULT_CONSUMER, Applier
from processors.applier.messages import RawMessage
from processors.applier.repair import list_entries, skip
from schemas.codec import CODEC, MAGIC
from schemas.events import AggregateRef, CatalogItemRetired, CatalogItemUpserted, Envelope
from schemas.exceptions import CodecErrorCode
from schemas.ids import StreamId
from schemas.topics import EVENTS_TOPIC
from tests.fixtures.applier_crash import AFTER_COMMIT, BEFORE_COMMIT, encode_messages

ROOT = Path(__file__).resolve().parents[4]
TENANT, CATALOG = "applier-faults", "c1"
ITEM = "catalog_item"


def on(item: str, revision: int) -> AggregateRef:
    return AggregateRef(type=ITEM, id=item, revision=revision)


def upsert(
    position: int,
    item: str,
    revision: int,
    parent: AggregateRef | None = None,
    epoch: int = 1,
    title: str | None = None,
) -> Envelope:
    return Envelope(
        tenant_id=TENANT,
        catalog_id=CATALOG,
        history_epoch=epoch,
        position=position,
        event_id=uuid.uuid4(),
        aggregate=on(item, revision),
        dependencies=(parent,) if parent else (),
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        payload=CatalogItemUpserted(
            class_id="lamp",
            status="active",
            title=title if title is not None else f"{item} r{revision}",
            parent_item_id=parent.id if parent else None,
        ),
    )


def retire(position: int, item: str, revision: int) -> Envelope:
    return Envelope(
        tenant_id=TENANT,
        catalog_id=CATALOG,
        history_epoch=1,
        position=position,
        event_id=uuid.uuid4(),
        aggregate=on(item, revision),
        dependencies=(on(item, revision - 1),),
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        payload=CatalogItemRetired(reason="discontinued"),
    )


class Partition:
    """Hands out consecutive offsets, as one Kafka partition does."""

    def __init__(self, number: int = 0) -> None:
        self.number = number
        self.next = 0

    def message(self, value: bytes | None, key: bytes | None = None) -> RawMessage:
        self.next += 1
        return RawMessage(EVENTS_TOPIC, self.number, self.next - 1, key, value)

    def event(self, envelope: Envelope) -> RawMessage:
        return self.message(CODEC.encode_value(envelope), CODEC.encode_key(envelope.key))


@dataclass(frozen=True)
class State:
    """What the product database holds for the test tenant."""

    items: dict[tuple[str, int], tuple[str, str, int, int]]  # (item, generation) → row
    progress: dict[int, int]  # history epoch → position
    inbox: dict[uuid.UUID, str]
    parked: set[uuid.UUID]


def read_state(dsn: str) -> State:
    with psycopg.connect(dsn) as conn:
        items = conn.execute(
            "SELECT item_id, generation, status, title, revision, position FROM product_item"
            " WHERE tenant_id = %s",
            (TENANT,),
        ).fetchall()
        progress = conn.execute(
            "SELECT history_epoch, position FROM stream_progress"
            " WHERE consumer = %s AND tenant_id = %s",
            (DEFAULT_CONSUMER, TENANT),
        ).fetchall()
        inbox = conn.execute(
            "SELECT event_id, outcome FROM inbox WHERE tenant_id = %s", (TENANT,)
        ).fetchall()
        parked = conn.execute(
            "SELECT event_id FROM parked_event WHERE tenant_id = %s", (TENANT,)
        ).fetchall()
    return State(
        {(i, g): (s, t, r, p) for i, g, s, t, r, p in items},
        {int(e): int(p) for e, p in progress},
        {e: o for e, o in inbox},
        {r[0] for r in parked},
    )


def duplicate_count(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(duplicate_count), 0) FROM stream_progress"
            " WHERE consumer = %s AND tenant_id = %s",
            (DEFAULT_CONSUMER, TENANT),
        ).fetchone()
    assert row is not None
    return int(row[0])


def set_epoch(control_dsn: str, epoch: int) -> None:
    with psycopg.connect(control_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE history_epoch SET epoch = %s WHERE tenant_id = %s AND catalog_id = %s",
            (epoch, TENANT, CATALOG),
        )


def cut_over(
    product_dsn: str,
    epoch: int,
    generation: int = 1,
    consumer: str = DEFAULT_CONSUMER,
    catalog: str = CATALOG,
) -> None:
    """The consumer's row of ``epoch`` serving ``generation``, as the cutover of a
    rebuild at that epoch leaves it (its SQL): until then the applier holds the
    epoch's events (``processors.applier.deferred``)."""
    with psycopg.connect(product_dsn) as conn:
        stream = StreamId(TENANT, catalog, epoch)
        cutover.lock_live(conn, consumer, stream)
        cutover.swap(conn, consumer, stream, generation, 0)


@pytest.fixture()
def applier(clean_db: DatabaseSettings) -> Iterator[Applier]:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, TENANT, CATALOG)
    # No epoch cache: the epoch tests change the epoch between batches.
    epochs = EpochSource(clean_db.control_dsn, ttl_seconds=0)
    applier = Applier(clean_db.product_dsn, epochs, CODEC)
    yield applier
    applier.close()
    epochs.close()


def family() -> list[Envelope]:
    """A parent, a child and a grandchild, the parent's next revision, the child retired."""
    return [
        upsert(1, "parent", 1),
        upsert(2, "child", 1, parent=on("parent", 1)),
        upsert(3, "grandchild", 1, parent=on("child", 1)),
        upsert(4, "parent", 2, title="parent renamed"),
        retire(5, "child", 2),
    ]


FAMILY_APPLIED = {
    ("parent", 1): ("active", "parent renamed", 2, 4),
    ("child", 1): ("retired", "child r1", 2, 5),
    ("grandchild", 1): ("active", "grandchild r1", 1, 3),
}


# (a) A crash between COMMIT and the acknowledgement.


def test_a_batch_redelivered_after_its_commit_is_absorbed_as_duplicates(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    events = family()
    partition = Partition()
    messages = [partition.event(e) for e in events]
    first = [messages[0], messages[2], messages[3]]  # the grandchild's parent is missing

    result = applier.apply(first)
    assert (result.applied, result.parked) == (2, 1)
    before = read_state(clean_db.product_dsn)
    assert before.progress == {1: 1}
    assert before.parked == {events[2].event_id}

    again = applier.apply(first)

    assert again.duplicates == 3
    assert (again.applied, again.parked, again.released, again.ignored) == (0, 0, 0, 0)
    assert read_state(clean_db.product_dsn) == before
    assert duplicate_count(clean_db.product_dsn) == 3

    # The rest, with the child twice in its batch, then that batch redelivered as well.
    second = [messages[1], messages[4], messages[1]]
    result = applier.apply(second)
    assert (result.applied, result.released, result.duplicates) == (3, 1, 1)
    after = read_state(clean_db.product_dsn)
    assert applier.apply(second).duplicates == 3
    assert read_state(clean_db.product_dsn) == after
    assert after.items == FAMILY_APPLIED
    assert after.progress == {1: 5}
    assert after.parked == set()
    assert set(after.inbox.values()) == {"applied"}


def run_and_die(settings: DatabaseSettings, mode: str, messages: list[RawMessage]) -> Any:
    """Apply ``messages`` in a child process that dies with exit code 9; its report."""
    spec = {
        "product_dsn": settings.product_dsn,
        "control_dsn": settings.control_dsn,
        "consumer": DEFAULT_CONSUMER,
        "messages": encode_messages(messages),
    }
    child = subprocess.run(
        [sys.executable, "-m", "tests.fixtures.applier_crash", mode],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert child.returncode == 9, child.stderr
    return json.loads(child.stdout.splitlines()[-1])


def test_a_process_killed_after_commit_leaves_the_batch_applied_and_redelivery_changes_nothing(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    events = family()
    partition = Partition()
    messages = [partition.event(e) for e in events]
    first = messages[:3]

    report = run_and_die(clean_db, AFTER_COMMIT, first)

    assert report["applied"] == 3
    committed = read_state(clean_db.product_dsn)
    assert committed.progress == {1: 3}
    assert set(committed.inbox) == {e.event_id for e in events[:3]}

    redelivered = applier.apply(first)

    assert redelivered.duplicates == 3
    assert (redelivered.applied, redelivered.parked) == (0, 0)
    assert read_state(clean_db.product_dsn) == committed

    applier.apply(messages[3:])
    final = read_state(clean_db.product_dsn)
    assert final.items == FAMILY_APPLIED
    assert final.progress == {1: 5}
    assert len(final.inbox) == 5


def test_a_process_killed_inside_the_transaction_leaves_nothing_and_redelivery_applies_all(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    events = family()
    partition = Partition()
    messages = [partition.event(e) for e in events]
    # The grandchild first: it parks, then the child releases it, all in one batch.
    batch = [messages[2], messages[0], messages[1], messages[3]]

    report = run_and_die(clean_db, BEFORE_COMMIT, batch)

    assert report == {"inbox_rows_in_transaction": 4}  # written, never committed
    empty = read_state(clean_db.product_dsn)
    assert empty == State({}, {}, {}, set())

    result = applier.apply(batch)

    assert (result.applied, result.duplicates) == (4, 0)
    applier.apply(messages[4:])
    final = read_state(clean_db.product_dsn)
    assert final.items == FAMILY_APPLIED
    assert final.progress == {1: 5}
    assert len(final.inbox) == 5


# (b) Malformed messages.


@dataclass(frozen=True)
class Quarantined:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    error_code: str
    event_id: uuid.UUID | None
    position: int | None
    status: str


def quarantined(dsn: str, partition: int) -> dict[int, Quarantined]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            'SELECT topic, partition, "offset", key, value, error_code, event_id, position,'
            " status, error_detail FROM quarantine WHERE consumer = %s AND topic = %s"
            " AND partition = %s",
            (DEFAULT_CONSUMER, EVENTS_TOPIC, partition),
        ).fetchall()
    found = {}
    for *fields, detail in rows:
        entry = Quarantined(*fields)
        assert detail, f"no error detail for offset {entry.offset}"
        found[entry.offset] = entry
    return found


def test_malformed_messages_are_quarantined_once_and_the_rest_still_applies(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    partition = Partition(3)
    events = [upsert(p, f"item{p}", 1) for p in (1, 2, 3, 4)]
    valid = CODEC.encode_value(events[0])
    key = CODEC.encode_key(events[0].key)
    bad = {
        "garbage": (b"definitely not avro", CodecErrorCode.BAD_MAGIC),
        "wrong magic": (b"\xc3\x02" + valid[2:], CodecErrorCode.BAD_MAGIC),
        "truncated header": (valid[:6], CodecErrorCode.TRUNCATED),
        "truncated body": (valid[:-4], CodecErrorCode.MALFORMED_BODY),
        "unknown writer schema": (MAGIC + bytes(8) + valid[10:], CodecErrorCode.UNKNOWN_SCHEMA),
        "no value": (None, CodecErrorCode.TRUNCATED),
    }
    expected: dict[int, tuple[bytes | None, str]] = {}

    def poison(name: str) -> RawMessage:
        value, code = bad[name]
        message = partition.message(value, key)
        expected[message.offset] = (value, code)
        return message

    batch1 = [
        partition.event(events[0]),
        poison("garbage"),
        partition.event(events[1]),
        poison("wrong magic"),
        poison("truncated header"),
        partition.event(events[2]),
    ]
    batch2 = [
        poison("truncated body"),
        poison("unknown writer schema"),
        poison("no value"),
        partition.event(events[3]),
    ]

    first = applier.apply(batch1)
    assert (first.applied, first.quarantined) == (3, 3)
    assert read_state(clean_db.product_dsn).progress == {1: 3}
    second = applier.apply(batch2)
    assert (second.applied, second.quarantined) == (1, 3)

    state = read_state(clean_db.product_dsn)
    assert state.progress == {1: 4}
    assert {item for item, _ in state.items} == {"item1", "item2", "item3", "item4"}
    rows = quarantined(clean_db.product_dsn, partition.number)
    assert rows == {
        offset: Quarantined(
            EVENTS_TOPIC, partition.number, offset, key, value, code, None, None, "open"
        )
        for offset, (value, code) in expected.items()
    }

    # Redelivered, nothing is quarantined twice and the valid events are duplicates.
    for batch, valid_count in ((batch1, 3), (batch2, 1)):
        result = applier.apply(batch)
        assert (result.quarantined, result.duplicates) == (0, valid_count)
    assert quarantined(clean_db.product_dsn, partition.number) == rows
    assert read_state(clean_db.product_dsn) == state


def test_an_event_that_cannot_be_applied_is_quarantined_once_with_its_identity(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    partition = Partition()
    # PostgreSQL text cannot hold NUL: this event decodes but can never be applied.
    poison_event = upsert(2, "poison", 1, title="bad\x00title")
    batch = [
        partition.event(upsert(1, "first", 1)),
        partition.event(poison_event),
        partition.event(upsert(3, "third", 1)),
    ]

    result = applier.apply(batch)

    assert (result.applied, result.quarantined) == (2, 1)
    state = read_state(clean_db.product_dsn)
    assert {item for item, _ in state.items} == {"first", "third"}
    assert state.progress == {1: 1}  # the poison's position is not terminal
    [entry] = quarantined(clean_db.product_dsn, partition.number).values()
    assert entry.error_code.startswith("APPLY_FAILED")
    assert (entry.event_id, entry.position, entry.offset) == (poison_event.event_id, 2, 1)
    assert entry.value == batch[1].value

    again = applier.apply(batch)

    assert (again.quarantined, again.duplicates) == (0, 2)
    assert len(quarantined(clean_db.product_dsn, partition.number)) == 1
    assert read_state(clean_db.product_dsn) == state


def test_skipping_an_event_sets_aside_what_was_parked_on_it_until_that_is_resolved_too(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    # The parent can never be applied; the operator skips it. Its child, parked on it,
    # would wait for ever: it becomes a quarantine entry of its own instead, and a
    # non-terminal one, so progress passes the child only once that is resolved too.
    partition = Partition()
    child = upsert(2, "child", 1, parent=on("parent", 1))
    batch = [
        partition.event(upsert(1, "parent", 1, title="bad\x00title")),
        partition.event(child),
        partition.event(upsert(3, "other", 1)),
    ]
    result = applier.apply(batch)
    assert (result.quarantined, result.parked, result.applied) == (1, 1, 1)
    with psycopg.connect(clean_db.product_dsn) as conn:
        [entry] = list_entries(conn)

    assert skip(clean_db.product_dsn, entry.id, "unfixable at source", "tester") == 1

    state = read_state(clean_db.product_dsn)
    assert state.progress == {1: 1}
    assert state.parked == set()
    assert state.inbox[child.event_id] == "quarantined"  # not terminal
    with psycopg.connect(clean_db.product_dsn) as conn:
        [dependant] = list_entries(conn)
    assert dependant.error_code == "DEPENDENCY_SKIPPED"
    assert (dependant.event_id, dependant.position, dependant.offset) == (child.event_id, 2, 1)
    assert f"#{entry.id}" in dependant.error_detail

    assert skip(clean_db.product_dsn, dependant.id, "its parent is gone", "tester") == 3
    state = read_state(clean_db.product_dsn)
    assert state.progress == {1: 3}
    assert state.inbox[child.event_id] == "skipped"


# (c) History epochs.


def test_an_event_of_an_older_epoch_is_recorded_and_changes_nothing(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    partition = Partition()
    applier.apply([partition.event(upsert(1, "a", 1, title="before the fence"))])
    set_epoch(clean_db.control_dsn, 2)
    cut_over(clean_db.product_dsn, 2)
    old_update = upsert(2, "a", 2, title="from the old history")
    old_orphan = upsert(3, "b", 1, parent=on("nowhere", 1))  # would otherwise park
    current = upsert(1, "c", 1, epoch=2)

    result = applier.apply([partition.event(e) for e in (old_update, old_orphan, current)])

    assert (result.applied, result.ignored, result.parked) == (1, 2, 0)
    state = read_state(clean_db.product_dsn)
    assert state.items == {
        ("a", 1): ("active", "before the fence", 1, 1),
        ("c", 1): ("active", "c r1", 1, 1),
    }
    assert state.inbox[old_update.event_id] == "ignored_old_epoch"
    assert state.inbox[old_orphan.event_id] == "ignored_old_epoch"
    assert state.inbox[current.event_id] == "applied"
    assert state.parked == set()
    # An audited terminal outcome: the old stream's progress may pass it.
    assert state.progress == {1: 3, 2: 1}

    again = applier.apply([partition.event(old_update)])
    assert (again.duplicates, again.ignored) == (1, 0)
    assert read_state(clean_db.product_dsn) == state


def test_an_event_of_an_epoch_not_yet_issued_writes_nothing_for_its_stream(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    # The applier now holds such an event in quarantine (EPOCH_UNKNOWN) rather than
    # raising: its stream gets no inbox row, projection row or progress, and other
    # events of the batch still apply. An operator retries it once the epoch exists.
    set_epoch(clean_db.control_dsn, 2)
    cut_over(clean_db.product_dsn, 2)
    partition = Partition()
    current = upsert(1, "a", 1, epoch=2)
    future = upsert(1, "b", 1, epoch=3)
    batch = [partition.event(current), partition.event(future)]

    result = applier.apply(batch)

    assert (result.applied, result.quarantined) == (1, 1)
    state = read_state(clean_db.product_dsn)
    assert state.inbox == {current.event_id: "applied"}
    assert state.items == {("a", 1): ("active", "a r1", 1, 1)}
    assert state.progress == {2: 1}
    [entry] = quarantined(clean_db.product_dsn, partition.number).values()
    assert entry.error_code == "EPOCH_UNKNOWN"
    assert (entry.event_id, entry.offset, entry.value) == (future.event_id, 1, batch[1].value)

    again = applier.apply(batch)
    assert (again.quarantined, again.duplicates) == (0, 1)
    assert read_state(clean_db.product_dsn) == state


def test_an_epoch_issued_after_the_cache_was_filled_is_looked_up_again(
    clean_db: DatabaseSettings,
) -> None:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, TENANT, CATALOG)
    epochs = EpochSource(clean_db.control_dsn, ttl_seconds=3600)
    applier = Applier(clean_db.product_dsn, epochs, CODEC)
    partition = Partition()
    try:
        applier.apply([partition.event(upsert(1, "a", 1))])  # caches epoch 1
        set_epoch(clean_db.control_dsn, 2)
        cut_over(clean_db.product_dsn, 2)
        fenced = upsert(1, "a", 2, epoch=2, title="after the fence")

        result = applier.apply([partition.event(fenced)])

        assert (result.applied, result.quarantined) == (1, 0)
        # The fresh look replaced the cached epoch: the old history is now refused.
        late_old = upsert(2, "a", 2, title="old history")
        assert applier.apply([partition.event(late_old)]).ignored == 1
        state = read_state(clean_db.product_dsn)
        assert state.items == {("a", 1): ("active", "after the fence", 2, 1)}
        assert state.inbox[late_old.event_id] == "ignored_old_epoch"
    finally:
        applier.close()
        epochs.close()
