"""A one-item decision's statements are planned once per connection: PostgreSQL keeps
a generic plan for each (primary-key lookups and inserts) instead of planning it at
every execution, which it must when a statement joins an array whose length it cannot
know. Read from ``pg_prepared_statements`` on the connection that sent them."""

from __future__ import annotations

from collections.abc import Callable

from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from producers.resolver.catalog_items import ItemChange
from producers.resolver.decisions import record_decision
from schemas.codec import CODEC
from tests.integration.producers.resolver.conftest import add_item
from tests.integration.producers.resolver.test_races import decision

DECISIONS = 20
"""psycopg prepares a statement at its sixth execution; PostgreSQL makes five custom
plans of a prepared one before it weighs a generic plan: twenty leave ten to see."""


def planned(pool: ConnectionPool) -> list[tuple[int, int, str]]:
    """(generic plans, custom plans, statement) of each statement the connection
    prepared, but the seeding's."""
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT generic_plans, custom_plans, statement FROM pg_prepared_statements"
        ).fetchall()
        conn.rollback()
    return [(int(g), int(c), str(s)) for g, c, s in rows]


def run(
    clean_db: DatabaseSettings, make: Callable[[int], object], seed: Callable[..., object]
) -> list[tuple[int, int, str]]:
    epochs = EpochSource(clean_db.control_dsn)
    with ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=1) as pool:

        def uow() -> UnitOfWork:
            return UnitOfWork(pool, epochs, CODEC)

        seed(uow)
        for n in range(DECISIONS):
            with uow() as u:
                record_decision(u, make(n))  # type: ignore[arg-type]
        found = planned(pool)
    epochs.close()
    return found


def replanned(statements: list[tuple[int, int, str]]) -> list[str]:
    """Statements executed often enough and still planned at every execution."""
    return [s[:90] for g, c, s in statements if g + c >= DECISIONS - 10 and c > 5]


def test_a_new_item_is_recorded_with_statements_planned_once(
    clean_db: DatabaseSettings,
) -> None:
    statements = run(
        clean_db,
        lambda n: decision(ItemChange("t1", "c1", f"item-{n}", "shoe", "t")),
        lambda uow: add_item(uow, "first"),
    )
    assert any(s.startswith("WITH w0 AS (UPDATE stream_cursor") for _, _, s in statements)
    assert replanned(statements) == []


def test_a_new_items_statements_are_parsed_once_by_psycopg(clean_db: DatabaseSettings) -> None:
    """psycopg converts a query's placeholders once and caches the result, but only for
    a query of at most 50 parameters and 4,096 bytes; a one-item decision's joined
    write passed 50 once its rows went as scalars (``db.row_source``) and was parsed
    again at every decision until its keys were shared (``db.joined_write.SHARED``)."""
    from psycopg import _queries  # the cache this guards is psycopg's own

    _queries._query2pg.cache_clear()
    run(
        clean_db,
        lambda n: decision(ItemChange("t1", "c1", f"item-{n}", "shoe", "t")),
        lambda uow: add_item(uow, "first"),
    )
    info = _queries._query2pg.cache_info()
    # The seeding's statements and each statement's first conversion miss; a statement
    # converted at every decision would miss twenty times. Each decision is one
    # statement, its write (the cursor known, the new item presumed absent).
    assert info.misses < DECISIONS, info
    assert info.hits >= DECISIONS - 1, info
