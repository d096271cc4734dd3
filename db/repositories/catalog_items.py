"""SQL for the catalog-item aggregate, run inside a Unit of Work's transaction."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from db.unit_of_work import Transaction

_COLUMNS = "item_id, class_id, status, title, parent_item_id, attributes, revision"


@dataclass(frozen=True, slots=True)
class ItemRow:
    item_id: str
    class_id: str
    status: str
    title: str
    parent_item_id: str | None
    attributes: dict[str, str]
    revision: int


def _row(values: Any) -> ItemRow:
    return ItemRow(*values)


def get_for_share(tx: Transaction, tenant_id: str, catalog_id: str, item_id: str) -> ItemRow | None:
    """Read an item and hold a share lock on it until the transaction ends.

    FOR SHARE keeps a concurrent writer from changing or retiring the item while a
    dependent change that relies on its current revision commits.
    """
    row = tx.execute(
        f"SELECT {_COLUMNS} FROM catalog_item"
        " WHERE tenant_id = %s AND catalog_id = %s AND item_id = %s FOR SHARE",
        (tenant_id, catalog_id, item_id),
    ).fetchone()
    return _row(row) if row else None


def get(tx: Transaction, tenant_id: str, catalog_id: str, item_id: str) -> ItemRow | None:
    """Read an item without locking it (for reads outside the write path)."""
    row = tx.execute(
        f"SELECT {_COLUMNS} FROM catalog_item"
        " WHERE tenant_id = %s AND catalog_id = %s AND item_id = %s",
        (tenant_id, catalog_id, item_id),
    ).fetchone()
    return _row(row) if row else None


def save(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    item_id: str,
    class_id: str,
    status: str,
    title: str,
    parent_item_id: str | None,
    attributes: dict[str, str],
    decision_id: uuid.UUID,
) -> int | None:
    """Insert or update the item with ``revision + 1``, naming the decision that
    accepts this revision; returns the new revision, or None (and changes nothing)
    if the item has been split: a split source keeps its last revision for good."""
    row = tx.execute(
        "INSERT INTO catalog_item (tenant_id, catalog_id, item_id, class_id, status, title,"
        " parent_item_id, attributes, revision, decision_id)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 1, %s)"
        " ON CONFLICT (tenant_id, catalog_id, item_id) DO UPDATE SET"
        " class_id = excluded.class_id, status = excluded.status, title = excluded.title,"
        " parent_item_id = excluded.parent_item_id, attributes = excluded.attributes,"
        " revision = catalog_item.revision + 1, decision_id = excluded.decision_id,"
        " updated_at = now() WHERE catalog_item.status <> 'split' RETURNING revision",
        (
            tenant_id,
            catalog_id,
            item_id,
            class_id,
            status,
            title,
            parent_item_id,
            Jsonb(attributes),
            decision_id,
        ),
    ).fetchone()
    return int(row[0]) if row else None


def all_items(tx: Transaction, tenant_id: str, catalog_id: str) -> list[ItemRow]:
    rows = tx.execute(
        f"SELECT {_COLUMNS} FROM catalog_item WHERE tenant_id = %s AND catalog_id = %s"
        " ORDER BY item_id",
        (tenant_id, catalog_id),
    ).fetchall()
    return [_row(r) for r in rows]
