"""A parked event of an epoch that is no longer current is never applied: when a new
epoch's event names the aggregate it waits on (same type, id and revision), the old
event gets the audited terminal outcome ``ignored_old_epoch`` and leaves parking."""

from __future__ import annotations

import psycopg

from db.epochs import EpochSource, ensure_epoch
from db.settings import DatabaseSettings
from processors.applier.batch import Applier
from schemas.codec import CODEC
from tests.integration.processors.test_applier_faults import (
    CATALOG,
    TENANT,
    Partition,
    on,
    upsert,
)


def test_a_new_epoch_never_releases_an_old_epochs_parked_event(
    clean_db: DatabaseSettings,
) -> None:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, TENANT, CATALOG)
    epochs = EpochSource(clean_db.control_dsn)
    applier = Applier(clean_db.product_dsn, epochs, CODEC)
    partition = Partition()
    child = upsert(2, "child", 1, parent=on("p", 1))
    assert applier.apply([partition.event(child)]).parked == 1

    # A restore: the control database issues epoch 2; its stream starts again at 1.
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE history_epoch SET epoch = 2 WHERE tenant_id = %s AND catalog_id = %s",
            (TENANT, CATALOG),
        )
    result = applier.apply([partition.event(upsert(1, "p", 1, epoch=2))])
    assert (result.applied, result.released, result.ignored) == (1, 1, 1), result

    with psycopg.connect(clean_db.product_dsn) as conn:
        items = conn.execute("SELECT item_id FROM product_item ORDER BY 1").fetchall()
        outcome = conn.execute(
            "SELECT outcome FROM inbox WHERE event_id = %s", (child.event_id,)
        ).fetchone()
        parked = conn.execute("SELECT count(*) FROM parked_event").fetchone()
    assert items == [("p",)]  # the old epoch's child was not applied
    assert outcome == ("ignored_old_epoch",) and parked == (0,)
    applier.close()
    epochs.close()
