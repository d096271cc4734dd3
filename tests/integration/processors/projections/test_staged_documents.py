"""A rebuild's load builds each search document from the rows, whatever order the
export's chunks come in: items in a chunk before any attribute value of the catalog
(the document made without looking for values, as the export orders them), values
first and the items after them, or both in one chunk, leave the same documents."""

from __future__ import annotations

import json
from collections.abc import Iterable

import psycopg

from db.settings import DatabaseSettings
from processors.projections import registry
from processors.projections.staging import COPY, CREATE, Staged

TENANT, CATALOG = "t-staged", "c1"
ITEMS: list[dict[str, object]] = [
    {"kind": "catalog_item", "id": f"i{n}", "revision": 1, "class_id": "lamp",
     "status": "active", "title": f"Lamp {n}", "parent_item_id": None,
     "attributes": {"size": str(n), "colour": "red"} if n % 2 else {}}
    for n in range(1, 6)
]  # fmt: skip
VALUES: list[dict[str, object]] = [
    {"kind": "attribute_value", "item_id": f"i{n}", "attribute_key": "finish",
     "revision": 1, "definition_version": 1, "value_type": "text", "value": f"matte{n}",
     "item_revision": 1, "decision_id": "00000000-0000-4000-8000-000000000001"}
    for n in (2, 3)
]  # fmt: skip


def _load(
    conn: psycopg.Connection, generation: int, chunks: Iterable[list[dict[str, object]]]
) -> None:
    staged = Staged(generation, TENANT, CATALOG, 40)
    conn.execute(CREATE)
    for records in chunks:
        with conn.cursor().copy(COPY) as copy:
            copy.write("".join(json.dumps(r) + "\n" for r in records).encode())
        registry.load_staged(conn, staged, {str(r["kind"]) for r in records})
        conn.commit()


def _documents(conn: psycopg.Connection, generation: int) -> list[tuple[object, ...]]:
    return conn.execute(
        "SELECT item_id, title, status, attribute_text, document::text, item_revision, position"
        " FROM product_search_document WHERE generation = %s AND tenant_id = %s ORDER BY 1",
        (generation, TENANT),
    ).fetchall()


def test_the_documents_do_not_depend_on_the_order_of_the_chunks(
    clean_db: DatabaseSettings,
) -> None:
    with psycopg.connect(clean_db.product_dsn) as conn:
        _load(conn, 11, [ITEMS, VALUES])  # the export's order: no values yet for the items
        _load(conn, 12, [VALUES, ITEMS])  # values first: the items' documents look them up
        _load(conn, 13, [VALUES + ITEMS])
        first = _documents(conn, 11)
    assert [(d[0], d[3]) for d in first] == [
        ("i1", "red 1"),
        ("i2", "matte2"),
        ("i3", "red 3 matte3"),
        ("i4", ""),
        ("i5", "red 5"),
    ]
    with psycopg.connect(clean_db.product_dsn) as conn:
        assert _documents(conn, 12) == first
        assert _documents(conn, 13) == first
