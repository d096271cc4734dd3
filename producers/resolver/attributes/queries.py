"""Reads of classes, attribute definitions and an item's attribute values, for the
operator API.

Each read runs in one REPEATABLE READ, READ ONLY transaction, so a definition and its
applicability (or an item and its values with their definitions) come from the same
snapshot, and no read takes a lock a writer would wait for.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from db.repositories import attributes as rows
from db.repositories import catalog_items as items
from db.repositories.attributes import ClassRow, DefinitionRow, ValueRow
from producers.resolver.exceptions import AttributeNotFound, ItemNotFound
from producers.resolver.snapshot import snapshot


@dataclass(frozen=True, slots=True)
class ItemValues:
    item_id: str
    class_id: str
    lineage: list[str]
    values: list[tuple[ValueRow, DefinitionRow]]


def list_classes(conn: psycopg.Connection, tenant_id: str, catalog_id: str) -> list[ClassRow]:
    with snapshot(conn) as tx:
        return rows.all_classes(tx, tenant_id, catalog_id)


def list_definitions(
    conn: psycopg.Connection, tenant_id: str, catalog_id: str, attribute_key: str | None
) -> list[DefinitionRow]:
    with snapshot(conn) as tx:
        return rows.list_definitions(tx, tenant_id, catalog_id, attribute_key)


def read_definition(
    conn: psycopg.Connection, tenant_id: str, catalog_id: str, attribute_key: str, version: int
) -> DefinitionRow:
    with snapshot(conn) as tx:
        found = rows.get_definition(tx, tenant_id, catalog_id, attribute_key, version)
    if found is None:
        raise AttributeNotFound(
            f"no attribute {attribute_key!r} version {version} in {tenant_id}/{catalog_id}"
        )
    return found


def item_values(
    conn: psycopg.Connection, tenant_id: str, catalog_id: str, item_id: str
) -> ItemValues:
    with snapshot(conn) as tx:
        item = items.get(tx, tenant_id, catalog_id, item_id)
        if item is None:
            raise ItemNotFound(f"no item {item_id!r} in {tenant_id}/{catalog_id}")
        values = []
        for value in rows.values_of_item(tx, tenant_id, catalog_id, item_id):
            definition = rows.get_definition(
                tx, tenant_id, catalog_id, value.attribute_key, value.definition_version
            )
            assert definition is not None  # a foreign key
            values.append((value, definition))
        lineage = rows.lineage(tx, tenant_id, catalog_id, item.class_id)
        return ItemValues(item_id, item.class_id, lineage, values)
