"""SQL of ``capture_identity_pin``: the generation a capture's class is resolved in."""

from __future__ import annotations

import uuid

from db.unit_of_work import Transaction


def pin(
    tx: Transaction,
    tenant_id: str,
    capture_id: uuid.UUID,
    catalog_id: str,
    class_id: str,
    generation: int | None,
) -> int | None:
    """Record ``generation`` as the capture's pin for the class unless one exists, and
    return the pin that holds (the first one recorded wins; NULL: no generation).

    A concurrent first pin of the same capture and class waits on the primary key
    and then finds the winner's row."""
    tx.execute(
        "INSERT INTO capture_identity_pin"
        " (tenant_id, capture_id, class_id, catalog_id, identity_generation)"
        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (tenant_id, capture_id, class_id, catalog_id, generation),
    )
    row = tx.execute(
        "SELECT identity_generation FROM capture_identity_pin"
        " WHERE tenant_id = %s AND capture_id = %s AND class_id = %s",
        (tenant_id, capture_id, class_id),
    ).fetchone()
    assert row is not None
    return None if row[0] is None else int(row[0])
