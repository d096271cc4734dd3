"""Two consumers of one stream (the live one and a shadow rebuild's) keep their own
dedupe, parking and progress, each writing its own generation: neither takes the
other's events for duplicates, releases the other's parked events, or moves the
other's progress (DESIGN §7: per (consumer, generation))."""

from __future__ import annotations

from dataclasses import replace

import psycopg

from db.control.epochs import EpochSource, ensure_epoch
from db.settings import DatabaseSettings
from processors.applier.batch import Applier
from schemas.codec import CODEC
from tests.integration.processors.applier.test_applier_faults import (
    CATALOG,
    TENANT,
    Partition,
    cut_over,
    on,
    upsert,
)


def _progress(dsn: str) -> dict[str, tuple[int, int]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT consumer, position, generation FROM stream_progress").fetchall()
    return {c: (int(p), int(g)) for c, p, g in rows}


def _items(dsn: str, generation: int) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT item_id, title, revision FROM product_item WHERE generation = %s"
            " ORDER BY item_id",
            (generation,),
        ).fetchall()


def test_a_shadow_consumer_and_the_live_one_keep_their_own_inbox_parking_and_progress(
    clean_db: DatabaseSettings,
) -> None:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, TENANT, CATALOG)
    with psycopg.connect(clean_db.product_dsn, autocommit=True) as conn:
        conn.execute(  # the shadow writes generation 2
            "INSERT INTO stream_progress (consumer, tenant_id, catalog_id, history_epoch,"
            " position, generation) VALUES ('shadow', %s, %s, 1, 0, 2)",
            (TENANT, CATALOG),
        )
    epochs = EpochSource(clean_db.control_dsn)
    live = Applier(clean_db.product_dsn, epochs, CODEC, consumer="live")
    shadow = Applier(clean_db.product_dsn, epochs, CODEC, consumer="shadow")
    first, child, parent = (
        upsert(1, "a", 1),
        upsert(2, "child", 1, parent=on("p", 1)),
        upsert(3, "p", 1),
    )
    partition = Partition()

    # The live consumer applies 1 and parks 2 (its parent comes at 3).
    assert live.apply([partition.event(first), partition.event(child)]).parked == 1
    # The shadow gets the same events: new to it, applied into its own generation.
    seen = shadow.apply([partition.event(first), partition.event(child), partition.event(parent)])
    assert (seen.applied, seen.duplicates, seen.parked) == (3, 0, 0), seen
    # The shadow's parent did not release the live consumer's parked child.
    assert _progress(clean_db.product_dsn) == {"live": (1, 1), "shadow": (3, 2)}
    assert [r[0] for r in _items(clean_db.product_dsn, 1)] == ["a"]
    assert [r[0] for r in _items(clean_db.product_dsn, 2)] == ["a", "child", "p"]

    # The live consumer's own copy of 3 releases its child; a redelivery to either
    # side is a duplicate for that side only.
    done = live.apply([partition.event(parent)])
    assert done.released == 1
    assert _progress(clean_db.product_dsn) == {"live": (3, 1), "shadow": (3, 2)}
    assert _items(clean_db.product_dsn, 1) == _items(clean_db.product_dsn, 2)
    assert live.apply([partition.event(first)]).duplicates == 1
    assert shadow.apply([partition.event(first)]).duplicates == 1
    live.close()
    shadow.close()
    epochs.close()


def test_revisions_are_read_in_each_catalogs_own_generation(clean_db: DatabaseSettings) -> None:
    """One batch of two catalogs, one cut over to generation 2 and one still on 1: the
    retired generation 1 rows of the first catalog (not cleaned up yet) never make its
    events look stale, and each catalog's events land in its own generation. A new
    epoch's stream of the cut-over catalog starts in generation 2 too."""
    other = "catalog-other"
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, TENANT, CATALOG)
        ensure_epoch(conn, TENANT, other)
    with psycopg.connect(clean_db.product_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO stream_progress (consumer, tenant_id, catalog_id, history_epoch,"
            " position, generation) VALUES ('live', %s, %s, 1, 0, 2)",
            (TENANT, CATALOG),
        )
        conn.execute(  # a retired generation's row, far ahead in revision
            "INSERT INTO product_item (generation, tenant_id, catalog_id, item_id, class_id,"
            " status, title, attributes, revision, position)"
            " VALUES (1, %s, %s, 'a', 'lamp', 'active', 'old', '{}', 9, 9)",
            (TENANT, CATALOG),
        )
    epochs = EpochSource(clean_db.control_dsn)
    live = Applier(clean_db.product_dsn, epochs, CODEC, consumer="live")
    partition = Partition()
    mine = upsert(1, "a", 1)
    theirs = replace(upsert(1, "b", 1), catalog_id=other)
    result = live.apply([partition.event(mine), partition.event(theirs)])
    assert (result.applied, result.ignored) == (2, 0), result
    with psycopg.connect(clean_db.product_dsn) as conn:
        rows = conn.execute(
            "SELECT catalog_id, item_id, generation, revision FROM product_item ORDER BY 1, 3"
        ).fetchall()
    assert rows == [(CATALOG, "a", 1, 9), (CATALOG, "a", 2, 1), (other, "b", 1, 1)]
    assert _progress_of(clean_db.product_dsn, "live") == {
        (CATALOG, 1): (1, 2),
        (other, 1): (1, 1),
    }
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE history_epoch SET epoch = 2 WHERE tenant_id = %s AND catalog_id = %s",
            (TENANT, CATALOG),
        )
    cut_over(clean_db.product_dsn, 2, generation=2, consumer="live")  # releases epoch 2
    later = upsert(1, "c", 1, epoch=2)
    assert live.apply([partition.event(later)]).applied == 1
    assert _progress_of(clean_db.product_dsn, "live")[(CATALOG, 2)] == (1, 2)
    live.close()
    epochs.close()


def _progress_of(dsn: str, consumer: str) -> dict[tuple[str, int], tuple[int, int]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT catalog_id, history_epoch, position, generation FROM stream_progress"
            " WHERE consumer = %s",
            (consumer,),
        ).fetchall()
    return {(c, int(e)): (int(p), int(g)) for c, e, p, g in rows}
