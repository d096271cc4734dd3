"""Helpers that give a stream outbox rows, publish them and age them."""

from __future__ import annotations

import uuid

import psycopg
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.resolver.outbox import mark_published
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from producers.resolver.catalog_items import ItemChange
from schemas.codec import CODEC
from schemas.ids import StreamId
from tests.fixtures.decisions import accept

EPOCH = 1


def write_events(settings: DatabaseSettings, tenant: str, catalog: str, n: int) -> StreamId:
    """Commit ``n`` events in one transaction (positions cursor+1…cursor+n): one
    decision accepting ``n - 1`` new items."""
    pool = ConnectionPool(settings.resolver_dsn, min_size=1, max_size=1, open=True)
    epochs = EpochSource(settings.control_dsn)
    try:
        items = [uuid.uuid4().hex[:8] for _ in range(n - 1)]
        with UnitOfWork(pool, epochs, CODEC) as uow:
            accept(
                uow,
                tenant,
                catalog,
                *(ItemChange(tenant, catalog, i, "lamp", f"lamp {i}") for i in items),
            )
            envelopes = uow.envelopes
    finally:
        pool.close()
        epochs.close()
    return StreamId(tenant, catalog, envelopes[0].history_epoch)


def publish(settings: DatabaseSettings, stream: StreamId, through: int) -> None:
    """Record ``through`` as published, as the relay does after Kafka confirms."""
    with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
        mark_published(conn, stream, through)


def age(settings: DatabaseSettings, stream: StreamId, through: int, seconds: float) -> None:
    """Make the rows up to ``through`` look committed ``seconds`` ago."""
    with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE outbox SET committed_at = now() - make_interval(secs => %s)"
            " WHERE tenant_id = %s AND catalog_id = %s AND history_epoch = %s"
            " AND position <= %s",
            (seconds, stream.tenant_id, stream.catalog_id, stream.history_epoch, through),
        )


def ready_stream(
    settings: DatabaseSettings,
    n: int,
    published: int,
    old: int,
    tenant: str = "t1",
    catalog: str = "c1",
) -> StreamId:
    """``n`` events, published through ``published``, the first ``old`` of them an hour
    old (the rest just committed)."""
    stream = write_events(settings, tenant, catalog, n)
    publish(settings, stream, published)
    age(settings, stream, old, 3600)
    return stream


def retained_positions(settings: DatabaseSettings, stream: StreamId) -> list[int]:
    with psycopg.connect(settings.resolver_dsn) as conn:
        rows = conn.execute(
            "SELECT position FROM outbox"
            " WHERE tenant_id = %s AND catalog_id = %s AND history_epoch = %s ORDER BY position",
            (stream.tenant_id, stream.catalog_id, stream.history_epoch),
        ).fetchall()
    return [int(p) for (p,) in rows]


def expire_lease(settings: DatabaseSettings, lease_id: uuid.UUID | str) -> None:
    with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE rebuild_lease SET expires_at = clock_timestamp() - interval '1 second'"
            " WHERE lease_id = %s",
            (lease_id,),
        )
