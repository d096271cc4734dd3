"""One read of one generation: the read API's only way into the product database.

Every response is read by ``SnapshotReader.read`` in one transaction, ``REPEATABLE
READ READ ONLY`` (the pool's connections are configured so, and every transaction
on them starts so):

1. the catalog's current history epoch, from the control database (cached for a
   second, as the applier caches it; serving pauses during an epoch fence, §8);
2. BEGIN; the first statement takes the snapshot: the live consumer's progress row
   of (tenant, catalog, epoch), whose generation serves (none:
   ``CatalogNotServed``);
3. the rows of that generation only, in the same snapshot (the caller's reads);
4. COMMIT (nothing was written).

Why one response never mixes generations nor sees a half-built one: the cutover
changes the live row's generation in one transaction, and a shadow generation is
only named by that row once it is complete. The snapshot sees the row either before
or after the swap, never between, and every row read after it is of the generation
it named, as of the same instant; the applier commits a batch's rows with the
progress row, so the position read matches the rows read. The old generation's rows
are deleted only after the cutover, and a snapshot taken before the swap still sees
them. A crash anywhere leaves nothing behind: nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import psycopg
from psycopg import IsolationLevel
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.control.pauses import PauseWatch
from db.product import serving as sql
from processors.serving.exceptions import CatalogBeingRestored, CatalogNotServed

T = TypeVar("T")


def configure_snapshot(conn: psycopg.Connection) -> None:
    """Every transaction on the connection is ``REPEATABLE READ READ ONLY``."""
    conn.isolation_level = IsolationLevel.REPEATABLE_READ
    conn.read_only = True


def snapshot_pool(dsn: str, size: int, name: str) -> ConnectionPool:
    """The read API's product-database pool (opened by the app's lifespan). Its
    connections are in autocommit mode, so nothing but ``read``'s explicit
    transaction ever holds a snapshot open."""
    return ConnectionPool(
        dsn,
        min_size=1,
        max_size=size,
        kwargs={"autocommit": True},
        configure=configure_snapshot,
        open=False,
        name=name,
    )


class SnapshotReader:
    def __init__(
        self,
        pool: ConnectionPool,
        epochs: EpochSource,
        consumer: str,
        pauses: PauseWatch | None = None,
    ) -> None:
        self.pool = pool
        self.epochs = epochs
        self.consumer = consumer
        self.pauses = pauses

    def read(
        self,
        tenant_id: str,
        catalog_id: str,
        rows: Callable[[psycopg.Connection, sql.Served], T],
    ) -> tuple[sql.Served, T]:
        """Steps 1-4 above: the serving generation and what ``rows`` reads of it. A
        catalog paused for a restore answers ``STREAM_BEING_RESTORED`` rather than
        data the restore is replacing."""
        pause = self.pauses.paused(tenant_id, catalog_id) if self.pauses is not None else None
        if pause is not None:
            raise CatalogBeingRestored(
                f"catalog {catalog_id!r} of tenant {tenant_id!r} is being restored (paused"
                f" by {pause.paused_by} at {pause.paused_at:%Y-%m-%d %H:%M:%S%z}: {pause.reason});"
                " try again after it is resumed",
                headers={"Retry-After": "5"},
            )
        epoch = self.epochs.epochs([(tenant_id, catalog_id)]).get((tenant_id, catalog_id))
        if epoch is None:
            raise CatalogNotServed(
                f"tenant {tenant_id!r} has no catalog {catalog_id!r} with a history yet"
            )
        with self.pool.connection() as conn, conn.transaction():
            served = sql.serving_generation(conn, self.consumer, tenant_id, catalog_id, epoch)
            if served is None:
                raise CatalogNotServed(
                    f"no generation of catalog {catalog_id!r} of tenant {tenant_id!r} serves"
                    f" yet: nothing of history epoch {epoch} has been applied"
                )
            return served, rows(conn, served)
