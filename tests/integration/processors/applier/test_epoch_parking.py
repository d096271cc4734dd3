"""A new epoch's events wait for the cutover at that epoch, and a parked event of an
epoch that is no longer current is never applied: when the new epoch's event that
names the aggregate it waits on (same type, id and revision) is handed back after
the cutover, it applies in the rebuilt generation and the old event gets the audited
terminal outcome ``ignored_old_epoch`` and leaves parking."""

from __future__ import annotations

import psycopg

from db.control.epochs import EpochSource, ensure_epoch
from db.product import cutover
from db.settings import DatabaseSettings
from processors.applier.batch import DEFAULT_CONSUMER, Applier
from processors.gaps import GapCloser
from processors.resolver_client import ResolverClient
from schemas.codec import CODEC
from schemas.ids import StreamId
from tests.fixtures.resolver_api import RunningApi
from tests.integration.processors.applier.test_applier_faults import (
    CATALOG,
    TENANT,
    Partition,
    on,
    upsert,
)


def test_a_new_epoch_waits_for_its_cutover_and_never_releases_an_old_epochs_parked_event(
    clean_db: DatabaseSettings, resolver_api: RunningApi
) -> None:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        ensure_epoch(conn, TENANT, CATALOG)
    epochs = EpochSource(clean_db.control_dsn)
    applier = Applier(clean_db.product_dsn, epochs, CODEC)
    client = ResolverClient(resolver_api.url, resolver_api.token)
    closer = GapCloser(clean_db.product_dsn, client, applier, DEFAULT_CONSUMER)
    partition = Partition()
    child = upsert(2, "child", 1, parent=on("p", 1))
    assert applier.apply([partition.event(child)]).parked == 1

    # A restore: the control database issues epoch 2; its stream starts again at 1.
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE history_epoch SET epoch = 2 WHERE tenant_id = %s AND catalog_id = %s",
            (TENANT, CATALOG),
        )
    parent = partition.event(upsert(1, "p", 1, epoch=2))
    result = applier.apply([parent])
    assert (result.held, result.applied, result.released) == (1, 0, 0), result
    # Nothing of epoch 2 in the old generation, no live row of it, the delivery kept.
    with psycopg.connect(clean_db.product_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM product_item").fetchone() == (0,)
        assert conn.execute(
            "SELECT count(*) FROM stream_progress WHERE history_epoch = 2"
        ).fetchone() == (0,)
        kept = conn.execute("SELECT reason, value FROM deferred_delivery").fetchall()
    assert kept == [("epoch_held", parent.value)]
    assert closer.hand_back_deferred().received == 0  # not due: no cutover yet

    # The cutover at epoch 2 (its SQL, as a rebuild commits it): generation 2 serves.
    with psycopg.connect(clean_db.product_dsn) as conn:
        stream = StreamId(TENANT, CATALOG, 2)
        cutover.lock_live(conn, DEFAULT_CONSUMER, stream)
        cutover.swap(conn, DEFAULT_CONSUMER, stream, 2, 0)
        conn.commit()
    result = closer.hand_back_deferred()
    assert (result.applied, result.released, result.ignored) == (1, 1, 1), result

    with psycopg.connect(clean_db.product_dsn) as conn:
        items = conn.execute("SELECT item_id, generation FROM product_item").fetchall()
        outcome = conn.execute(
            "SELECT outcome FROM inbox WHERE event_id = %s", (child.event_id,)
        ).fetchone()
        parked = conn.execute("SELECT count(*) FROM parked_event").fetchone()
        left = conn.execute("SELECT count(*) FROM deferred_delivery").fetchone()
    assert items == [("p", 2)]  # the old epoch's child was not applied
    assert outcome == ("ignored_old_epoch",) and parked == (0,) and left == (0,)
    client.close()
    applier.close()
    epochs.close()
