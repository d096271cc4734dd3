"""SQL for source bindings: which catalog and adapter the captures of a source go to."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from db.unit_of_work import Transaction


@dataclass(frozen=True, slots=True)
class BindingRow:
    tenant_id: str
    source: str
    catalog_id: str
    adapter: str
    registered_by: str
    created_at: datetime


_ROW = "tenant_id, source, catalog_id, adapter, registered_by, created_at"


def get(tx: Transaction, tenant_id: str, source: str) -> BindingRow | None:
    row = tx.execute(
        f"SELECT {_ROW} FROM source_binding WHERE tenant_id = %s AND source = %s",
        (tenant_id, source),
    ).fetchone()
    return BindingRow(*row) if row else None


def insert(
    tx: Transaction, tenant_id: str, source: str, catalog_id: str, adapter: str, actor: str
) -> BindingRow:
    """Register the binding unless the source has one; returns the stored binding
    (the earlier one, if there was one: the caller compares)."""
    tx.execute(
        "INSERT INTO source_binding (tenant_id, source, catalog_id, adapter, registered_by)"
        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (tenant_id, source, catalog_id, adapter, actor),
    )
    found = get(tx, tenant_id, source)
    assert found is not None
    return found


def page(
    tx: Transaction, tenant_id: str | None, after: tuple[str, str], limit: int
) -> list[BindingRow]:
    """Bindings in (tenant, source) order after ``after``."""
    rows = tx.execute(
        f"SELECT {_ROW} FROM source_binding WHERE (tenant_id, source) > (%s, %s)"
        " AND (%s::text IS NULL OR tenant_id = %s) ORDER BY tenant_id, source LIMIT %s",
        (*after, tenant_id, tenant_id, limit),
    ).fetchall()
    return [BindingRow(*r) for r in rows]
