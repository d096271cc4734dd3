"""SQL of ``capture_identity_pin``: the generation a capture's class is resolved in."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from db.unit_of_work import Transaction


@dataclass(frozen=True, slots=True)
class Pin:
    generation: int | None  # None: the class had no active generation


def get(tx: Transaction, tenant_id: str, capture_id: uuid.UUID, class_id: str) -> Pin | None:
    """The capture's pin for the class, or None before its first resolution."""
    row = tx.execute(
        "SELECT identity_generation FROM capture_identity_pin"
        " WHERE tenant_id = %s AND capture_id = %s AND class_id = %s",
        (tenant_id, capture_id, class_id),
    ).fetchone()
    if row is None:
        return None
    return Pin(None if row[0] is None else int(row[0]))


def pin(
    tx: Transaction,
    tenant_id: str,
    capture_id: uuid.UUID,
    catalog_id: str,
    class_id: str,
    generation: int | None,
) -> Pin:
    """Record ``generation`` as the capture's pin for the class unless one exists, and
    return the pin that holds (the first one recorded wins).

    A concurrent first pin of the same capture and class waits on the primary key
    and then finds the winner's row (the read is a statement of its own, so it sees
    the winner's commit)."""
    tx.execute(
        "INSERT INTO capture_identity_pin"
        " (tenant_id, capture_id, class_id, catalog_id, identity_generation)"
        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (tenant_id, capture_id, class_id, catalog_id, generation),
    )
    held = get(tx, tenant_id, capture_id, class_id)
    assert held is not None
    return held
