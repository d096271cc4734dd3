"""The contract every derived projection keeps (``registry.DERIVED``), against the real
product database: its rows are what the source projections' rows say, whatever the
order and batching of the events (a redelivery included), a generation sees only its
own, and a refresh that changes nothing writes nothing.

The events go through ``registry.apply``, each batch in a transaction of its own, as
the applier and a rebuild's load call it. Events arrive here in any order, also an
attribute value before its item (the live applier parks such a value; a rebuild's
load writes an export's records in whatever order they come).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.rows import dict_row

from db.settings import DatabaseSettings
from processors.projections import attribute_values, catalog_items, registry, search_documents
from schemas.events import Envelope
from tests.integration.processors.projections.builders import BUILDERS

ITEMS = ("i1", "a/b")  # an item id may hold a slash
VALUES = ("i1/size", "a/b/colour", "i1/colour")
_generations = itertools.count(5000)


def test_every_derived_projection_has_a_case_here() -> None:
    assert [d.table for d in registry.DERIVED] == ["product_search_document"]
    assert search_documents.PROJECTION.sources == {
        catalog_items.AGGREGATE,
        attribute_values.AGGREGATE,
    }


@pytest.fixture()
def conn(clean_db: DatabaseSettings) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(clean_db.product_dsn, autocommit=True) as conn:
        yield conn


def _item(item_id: str, revision: int) -> Envelope:
    return BUILDERS[catalog_items.AGGREGATE].event(item_id, revision)


def _value(value_id: str, revision: int) -> Envelope:
    return BUILDERS[attribute_values.AGGREGATE].event(value_id, revision)


def _apply(conn: psycopg.Connection[Any], generation: int, events: list[Envelope]) -> None:
    with conn.transaction():
        registry.apply(conn, generation, events)


def documents(
    conn: psycopg.Connection[Any], generation: int, *, updated_at: bool = False
) -> dict[str, dict[str, Any]]:
    columns = "item_id, title, status, attribute_text, item_revision, position"
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            f"SELECT {columns}{', updated_at' if updated_at else ''}"
            " FROM product_search_document WHERE generation = %s",
            (generation,),
        )
        return {r["item_id"]: r for r in cur.fetchall()}


def expected(conn: psycopg.Connection[Any], generation: int) -> dict[str, dict[str, Any]]:
    """The documents, computed here from the source rows: title and status of the
    item; its own attributes' values and then its attribute values, each in key
    order, joined by spaces."""
    with conn.cursor(row_factory=dict_row) as cur:
        items = cur.execute(
            "SELECT item_id, title, status, attributes, revision, position FROM product_item"
            " WHERE generation = %s",
            (generation,),
        ).fetchall()
        values = cur.execute(
            "SELECT item_id, attribute_key, value, position FROM product_attribute_value"
            " WHERE generation = %s ORDER BY attribute_key",
            (generation,),
        ).fetchall()
    found = {}
    for item in items:
        own = [item["attributes"][k] for k in sorted(item["attributes"])]
        typed = [v for v in values if v["item_id"] == item["item_id"]]
        found[item["item_id"]] = {
            "item_id": item["item_id"],
            "title": item["title"],
            "status": item["status"],
            "attribute_text": " ".join([*own, *(v["value"] for v in typed)]),
            "item_revision": item["revision"],
            "position": max([item["position"], *(v["position"] for v in typed)]),
        }
    return found


def test_a_document_is_built_from_the_item_and_its_attribute_values(
    conn: psycopg.Connection[Any],
) -> None:
    generation = next(_generations)
    _apply(conn, generation, [_item("i1", 1), _item("a/b", 2), _value("i1/size", 3)])

    docs = documents(conn, generation)
    assert docs == expected(conn, generation)
    assert docs["i1"]["attribute_text"] == "1 43"  # {"revision": "1"}, then size = 43
    assert docs["a/b"]["attribute_text"] == "2"
    hits = conn.execute(
        "SELECT item_id FROM product_search_document WHERE generation = %s"
        " AND document @@ plainto_tsquery('simple', %s)",
        (generation, "43"),
    ).fetchall()
    assert hits == [("i1",)]


def test_a_redelivery_or_a_refresh_that_changes_nothing_writes_nothing(
    conn: psycopg.Connection[Any],
) -> None:
    generation = next(_generations)
    _apply(conn, generation, [_item("i1", 1), _value("i1/size", 1)])
    _apply(conn, generation, [_item("i1", 2)])
    stored = documents(conn, generation, updated_at=True)

    _apply(conn, generation, [_item("i1", 2), _value("i1/size", 1)])  # later now()
    _apply(conn, generation, [_item("i1", 1)])  # stale: the item row does not move

    assert documents(conn, generation, updated_at=True) == stored


def test_a_generation_never_sees_another_generations_documents(
    conn: psycopg.Connection[Any],
) -> None:
    first, second = next(_generations), next(_generations)
    _apply(conn, first, [_item("i1", 1)])
    of_first = documents(conn, first, updated_at=True)

    _apply(conn, second, [_item("i1", 2), _value("i1/size", 2), _item("a/b", 1)])
    # A value in the second generation whose item the first has: not the first's.
    _apply(conn, second, [_value("i1/colour", 1)])

    assert documents(conn, first, updated_at=True) == of_first
    assert documents(conn, second) == expected(conn, second)
    assert set(documents(conn, second)) == {"i1", "a/b"}


@st.composite
def deliveries(draw: st.DrawFn) -> list[list[Envelope]]:
    """Revisions of two items and three attribute values (of both items), each
    delivered at least once and some again, in any order, cut into batches."""
    every = [
        *((i, r) for i in ITEMS for r in range(1, draw(st.integers(1, 3)) + 1)),
        *((v, r) for v in VALUES for r in range(1, draw(st.integers(0, 2)) + 1)),
    ]
    again = draw(st.lists(st.sampled_from(every), max_size=4))
    order = draw(st.permutations(every + again))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(order) - 1)), max_size=4)))
    batches = [order[i:j] for i, j in itertools.pairwise([0, *cuts, len(order)])]
    return [
        [_item(a, r) if a in ITEMS else _value(a, r) for a, r in sorted(set(batch))]
        for batch in batches
        if batch
    ]


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(batches=deliveries())
def test_any_order_and_batching_leaves_the_documents_of_the_rows(
    conn: psycopg.Connection[Any], batches: list[list[Envelope]]
) -> None:
    generation = next(_generations)
    for batch in batches:
        _apply(conn, generation, batch)

    docs = documents(conn, generation)
    assert set(docs) == set(ITEMS)
    assert docs == expected(conn, generation)
