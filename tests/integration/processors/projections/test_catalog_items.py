"""The catalog-item projection's second statement, the status change (a retirement the
batch has no whole row for), against the real product database: it keeps the same
guard and the same generation as the upsert the contract suite covers."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from db.settings import DatabaseSettings
from processors.projections.catalog_items import PROJECTION
from schemas.events import CatalogItemRetired, CatalogItemUpserted, Envelope
from tests.unit.processors.builders import event, ref

_generations = itertools.count(1)


def upserted(item: str, revision: int) -> Envelope:
    return event(
        revision,
        ref("catalog_item", item, revision),
        CatalogItemUpserted(class_id="shoe", status="active", title=f"{item} r{revision}"),
    )


def retired(item: str, revision: int) -> Envelope:
    return event(revision, ref("catalog_item", item, revision), CatalogItemRetired(reason="r"))


@pytest.fixture()
def conn(clean_db: DatabaseSettings) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(clean_db.product_dsn, autocommit=True) as conn:
        yield conn


def apply(conn: psycopg.Connection[Any], generation: int, *events: Envelope) -> None:
    with conn.transaction():
        PROJECTION.apply(conn, generation, events)


def row(conn: psycopg.Connection[Any], generation: int, item: str) -> tuple[Any, ...] | None:
    return conn.execute(
        "SELECT title, status, revision, position, updated_at FROM product_item"
        " WHERE generation = %s AND item_id = %s",
        (generation, item),
    ).fetchone()


def revision(conn: psycopg.Connection[Any], generation: int, item: str) -> int | None:
    key = ("t1", "c1", "catalog_item", item)
    return PROJECTION.load_revisions(conn, generation, [key]).get(key)


def test_a_retirement_changes_the_stored_row_and_never_a_higher_revision(
    conn: psycopg.Connection[Any],
) -> None:
    generation = next(_generations)
    apply(conn, generation, upserted("i1", 1))
    apply(conn, generation, retired("i1", 3))
    stored = row(conn, generation, "i1")
    assert stored is not None and stored[:4] == ("i1 r1", "retired", 3, 3)

    apply(conn, generation, retired("i1", 2))
    apply(conn, generation, upserted("i1", 2))
    apply(conn, generation, retired("i1", 3))

    assert row(conn, generation, "i1") == stored
    assert revision(conn, generation, "i1") == 3


def test_a_retirement_of_an_item_not_stored_writes_nothing(
    conn: psycopg.Connection[Any],
) -> None:
    generation = next(_generations)
    apply(conn, generation, retired("i1", 2))
    assert row(conn, generation, "i1") is None
    assert revision(conn, generation, "i1") is None


def test_a_retirement_in_the_batch_of_its_upsert_writes_the_whole_row_retired(
    conn: psycopg.Connection[Any],
) -> None:
    generation = next(_generations)
    apply(conn, generation, upserted("i1", 1), retired("i1", 2))
    stored = row(conn, generation, "i1")
    assert stored is not None and stored[:4] == ("i1 r1", "retired", 2, 2)


def test_a_retirement_in_one_generation_leaves_another_as_it_is(
    conn: psycopg.Connection[Any],
) -> None:
    first, second = next(_generations), next(_generations)
    apply(conn, first, upserted("i1", 1))
    apply(conn, second, upserted("i1", 1))
    stored = row(conn, first, "i1")

    apply(conn, second, retired("i1", 2))

    assert row(conn, first, "i1") == stored
    stored = row(conn, second, "i1")
    assert stored is not None and stored[1:3] == ("retired", 2)

    apply(conn, first, retired("i1", 3))

    assert row(conn, second, "i1") == stored
    assert revision(conn, first, "i1") == 3
