"""The applier against real PostgreSQL when the resolver's history went back under it
(a restore nobody fenced): a delivery at a position the consumer holds under another
event id flags the stream rewound in the control database and is quarantined
``STREAM_REWOUND``, as is every later delivery of the stream, with nothing applied;
a true redelivery stays a duplicate, also once its inbox row was pruned; after the
fence, the held deliveries belong to an old epoch and their repair ends."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from db.control.epochs import (
    POSITION_REUSED,
    EpochSource,
    clear_rewound,
    ensure_epoch,
    issue_next,
    rewound_now,
)
from db.resolver.fencing import settle_old_epochs
from db.settings import DatabaseSettings
from processors.applier.batch import DEFAULT_CONSUMER, Applier
from processors.applier.repair import Entry, list_entries, retry, skip
from processors.applier.rewound import STREAM_REWOUND
from schemas.codec import CODEC
from tests.integration.processors.applier.test_applier_faults import (
    CATALOG,
    TENANT,
    Partition,
    read_state,
    upsert,
)


@pytest.fixture()
def epochs(clean_db: DatabaseSettings) -> Iterator[EpochSource]:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, TENANT, CATALOG)
    # No cache: a fence pauses the processes for longer than the cache lives.
    source = EpochSource(clean_db.control_dsn, ttl_seconds=0)
    yield source
    source.close()


@pytest.fixture()
def applier(clean_db: DatabaseSettings, epochs: EpochSource) -> Iterator[Applier]:
    applier = Applier(clean_db.product_dsn, epochs, CODEC)
    yield applier
    applier.close()


def open_entries(settings: DatabaseSettings) -> list[Entry]:
    with psycopg.connect(settings.product_dsn) as conn:
        return list_entries(conn)


def flags(settings: DatabaseSettings) -> list[tuple[str, int, str]]:
    with psycopg.connect(settings.control_dsn) as conn:
        return [
            (f"{r.tenant_id}/{r.catalog_id}", r.history_epoch, r.signal) for r in rewound_now(conn)
        ]


def test_a_position_held_under_another_event_id_flags_the_stream_and_applies_nothing(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    kafka = Partition()
    history = [upsert(p, f"item{p}", 1) for p in (1, 2, 3)]
    first = applier.apply([kafka.event(e) for e in history])
    assert (first.applied, first.quarantined) == (3, 0)
    before = read_state(clean_db.product_dsn)
    assert before.progress == {1: 3}

    # A true redelivery of a held position (same event id) is a duplicate, as ever.
    again = applier.apply([kafka.event(history[1])])
    assert (again.duplicates, again.quarantined, again.applied) == (1, 0, 0)
    assert flags(clean_db) == []

    # The resolver, restored to position 1 and written again, hands out 2 and 3 anew.
    rewritten = [upsert(2, "other2", 1), upsert(3, "other3", 1)]
    result = applier.apply([kafka.event(e) for e in rewritten])
    assert (result.applied, result.duplicates, result.quarantined) == (0, 0, 2)
    assert flags(clean_db) == [(f"{TENANT}/{CATALOG}", 1, POSITION_REUSED)]
    entries = open_entries(clean_db)
    assert [(e.event_id, e.position, e.error_code) for e in entries] == [
        (rewritten[0].event_id, 2, STREAM_REWOUND),
        (rewritten[1].event_id, 3, STREAM_REWOUND),
    ]
    fix = f"gapless fence-epoch --tenant {TENANT} --catalog {CATALOG} --epoch 1"
    assert fix in entries[0].error_detail and str(history[1].event_id) in entries[0].error_detail

    # Past the old progress, the rewound stream's deliveries are held too: nothing of
    # the new history is applied over the old one.
    beyond = applier.apply([kafka.event(upsert(4, "other4", 1))])
    assert (beyond.applied, beyond.quarantined) == (0, 1)
    after = read_state(clean_db.product_dsn)
    assert after.items == before.items and after.progress == before.progress
    assert len(open_entries(clean_db)) == 3

    # The original events stay duplicates while the stream is flagged.
    late = applier.apply([kafka.event(e) for e in history])
    assert (late.duplicates, late.quarantined) == (3, 0)

    # An operator's retry before the fence changes nothing: the entry stays open.
    assert retry(clean_db.product_dsn, applier, entries[0].id, "ops") is False
    assert read_state(clean_db.product_dsn).items == before.items


def test_a_position_whose_inbox_row_was_pruned_cannot_tell_and_stays_a_duplicate(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    kafka = Partition()
    applier.apply([kafka.event(upsert(p, f"item{p}", 1)) for p in (1, 2)])
    with psycopg.connect(clean_db.product_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM inbox WHERE tenant_id = %s AND position = 1", (TENANT,))
    result = applier.apply([kafka.event(upsert(1, "other1", 1))])
    assert (result.duplicates, result.quarantined, result.applied) == (1, 0, 0)
    assert flags(clean_db) == [] and open_entries(clean_db) == []


def test_after_the_fence_the_held_deliveries_are_old_history_and_their_repair_ends(
    clean_db: DatabaseSettings, applier: Applier, epochs: EpochSource
) -> None:
    kafka = Partition()
    applier.apply([kafka.event(upsert(p, f"item{p}", 1)) for p in (1, 2, 3)])
    before = read_state(clean_db.product_dsn)
    applier.apply([kafka.event(upsert(p, f"other{p}", 1)) for p in (2, 3)])
    retried, skipped = open_entries(clean_db)

    # What the fence does in the control database: the next epoch, the flag cleared.
    with psycopg.connect(clean_db.control_dsn) as conn:
        assert issue_next(conn, TENANT, CATALOG, 1, "ops", "unfenced restore").epoch == 2
        assert clear_rewound(conn, TENANT, CATALOG, 2, "ops") == 1
        conn.commit()
    assert flags(clean_db) == []
    assert epochs.rewound(TENANT, CATALOG, 1) is None  # refreshed: it is fenced

    # Retried, the delivery is an old epoch's: audited ``ignored_old_epoch``, not applied.
    assert retry(clean_db.product_dsn, applier, retried.id, "ops") is True
    state = read_state(clean_db.product_dsn)
    assert retried.event_id is not None
    assert state.inbox[retried.event_id] == "ignored_old_epoch"
    assert state.items == before.items
    assert skip(clean_db.product_dsn, skipped.id, "old history", "ops") == 3

    # The fence's settlement supersedes whatever is still open of the old epoch.
    applier.apply([kafka.event(upsert(5, "other5", 1))])
    with psycopg.connect(clean_db.product_dsn) as conn:
        settled = settle_old_epochs(conn, DEFAULT_CONSUMER, TENANT, CATALOG, 2)
        conn.commit()
    assert settled.quarantined == 0  # an old epoch's delivery is ignored, never held
    assert open_entries(clean_db) == []
