"""Fixtures of the resolver domain tests: Units of Work whose connections log in as the
services do (``GAPLESS_RESOLVER_DSN``, a member of the application role), so every
test also proves the role's grants suffice."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.settings import DatabaseSettings
from db.unit_of_work import Transaction, UnitOfWork
from db.unlocked import Rows
from producers.resolver.catalog_items import ItemChange, RetireItem
from schemas.codec import CODEC
from schemas.events import EvidenceRef
from tests.fixtures.decisions import accept

EVIDENCE = (EvidenceRef(capture_id="cap-1", locator="$.offers[0]"),)

UowFactory = Callable[[], UnitOfWork]


@pytest.fixture()
def app_pool(clean_db: DatabaseSettings) -> Iterator[ConnectionPool]:
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=8, open=True)
    yield pool
    pool.close()


@pytest.fixture()
def uow(app_pool: ConnectionPool, clean_db: DatabaseSettings) -> UowFactory:
    epochs = EpochSource(clean_db.control_dsn)
    return lambda: UnitOfWork(app_pool, epochs, CODEC)


def add_item(uow: UowFactory, item_id: str, tenant: str = "t1", catalog: str = "c1") -> str:
    """Create the item through a rule decision; returns the decision's id."""
    with uow() as u:
        recorded = accept(
            u, tenant, catalog, ItemChange(tenant, catalog, item_id, "shoe", f"item {item_id}")
        )
    return str(recorded.decision_id)


def retire(uow: UowFactory, item_id: str, tenant: str = "t1", catalog: str = "c1") -> None:
    with uow() as u:
        accept(u, tenant, catalog, RetireItem(item_id, "discontinued"))


def assert_contiguous_outbox(dsn: str) -> None:
    """Every stream's outbox holds exactly positions 1..cursor."""
    with psycopg.connect(dsn) as conn:
        streams = conn.execute(
            "SELECT tenant_id, catalog_id, history_epoch, position FROM stream_cursor"
        ).fetchall()
        for tenant, catalog, epoch, cursor in streams:
            positions = [
                r[0]
                for r in conn.execute(
                    "SELECT position FROM outbox WHERE tenant_id = %s AND catalog_id = %s"
                    " AND history_epoch = %s ORDER BY position",
                    (tenant, catalog, epoch),
                )
            ]
            assert positions == list(range(1, cursor + 1)), (tenant, catalog, epoch)


@pytest.fixture()
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every statement the write path sends inside a Unit of Work's transaction."""
    sent: list[str] = []
    real = Transaction.execute

    def counting(self: Transaction, query: str, params: Any = None) -> Rows:
        sent.append(query)
        return real(self, query, params)

    monkeypatch.setattr(Transaction, "execute", counting)
    yield sent
