"""After a rebuild: its shadow's rows, its lease and retired generations, removed.

Runs on the rebuild timer, a bounded amount of work per pass, every batch its own
short transaction (``db.product.generations``), so serving and the live applier never wait
on it:

1. each finished rebuild not yet cleaned: release its lease (idempotent; a lease
   already expired or released is fine, and so is one the resolver no longer knows,
   404 after a restore: it pins nothing), delete its shadow consumer's inbox, parked
   and offset rows in batches, then in one transaction drop the shadow's progress
   rows, supersede its open quarantine entries and set ``cleaned_at``;
2. each retired generation (no progress row points at it, no unfinished rebuild
   loads it) past the newest ``keep`` of its catalog: its projection rows, table by
   table, in batches.

A crash between batches leaves rows nothing reads (a finished shadow, a retired
generation); the next pass carries on where this one stopped. A rebuild whose
lease could not be released (the resolver unreachable, or refusing) is not marked
cleaned, so the release is tried again next pass; the other rebuilds go on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import psycopg

from db.product import generations as sql
from db.product import rebuilds
from processors.exceptions import ResolverRefused, ResolverUnavailable
from processors.resolver_client import ResolverClient

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Swept:
    rebuilds_cleaned: int = 0
    shadow_rows: int = 0
    generation_rows: int = 0
    more: bool = False


@dataclass(slots=True)
class _Budget:
    batches: int

    def take(self) -> bool:
        self.batches -= 1
        return self.batches >= 0


def _drain(
    conn: psycopg.Connection, delete: Callable[[], int], batch: int, budget: _Budget
) -> int | None:
    """Run ``delete`` (one batch, committed) until a batch comes back short; the rows
    removed, or None when the budget ran out first."""
    removed = 0
    while budget.take():
        with conn.transaction():
            n = delete()
        removed += n
        if n < batch:
            return removed
    return None


def clear_shadow(conn: psycopg.Connection, consumer: str, note: str, batch: int = 5000) -> int:
    """Every row of a shadow consumer, batch by batch (``conn`` in autocommit), then its
    progress rows; its open quarantine entries become ``superseded`` with ``note``.
    The rows removed."""
    removed = 0
    for table in sql.SHADOW_TABLES:
        removed += (
            _drain(
                conn,
                partial(sql.delete_consumer_batch, conn, table, consumer, batch),
                batch,
                _Budget(2**31),
            )
            or 0
        )
    with conn.transaction():
        sql.drop_consumer(conn, consumer, note)
    return removed


def sweep(
    product_dsn: str,
    client: ResolverClient,
    *,
    keep: int = 0,
    batch: int = 5000,
    max_batches: int = 40,
) -> Swept:
    """Steps 1-2 within ``max_batches`` deletes; ``more`` says work is left."""
    swept = Swept()
    budget = _Budget(max_batches)
    with psycopg.connect(product_dsn, autocommit=True) as conn:
        for row in rebuilds.uncleaned(conn):
            if row.lease_id is not None:
                try:
                    if not client.release_lease(str(row.lease_id)):
                        log.info(
                            "rebuild %s: the resolver no longer knew its lease", row.rebuild_id
                        )
                except (ResolverUnavailable, ResolverRefused) as exc:
                    log.warning("rebuild %s: lease not released yet: %s", row.rebuild_id, exc)
                    continue
            for table in sql.SHADOW_TABLES:
                removed = _drain(
                    conn,
                    partial(sql.delete_consumer_batch, conn, table, row.shadow_consumer, batch),
                    batch,
                    budget,
                )
                if removed is None:
                    swept.more = True
                    return swept
                swept.shadow_rows += removed
            with conn.transaction():
                sql.drop_consumer(
                    conn, row.shadow_consumer, f"rebuild {row.rebuild_id} finished ({row.phase})"
                )
                rebuilds.mark_cleaned(conn, row.rebuild_id)
            swept.rebuilds_cleaned += 1
        for tenant, catalog, generation in sql.retired(conn, keep):
            for projection in sql.projection_tables():
                removed = _drain(
                    conn,
                    partial(sql.delete_batch, conn, projection, tenant, catalog, generation, batch),
                    batch,
                    budget,
                )
                if removed is None:
                    swept.more = True
                    return swept
                swept.generation_rows += removed
            log.info("retired generation %d of %s/%s removed", generation, tenant, catalog)
    return swept
