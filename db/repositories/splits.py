"""SQL for item splits: insert-only records of a split, its successors and remaps."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from db.unit_of_work import Transaction


def insert(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    split_id: uuid.UUID,
    source_item_id: str,
    source_revision: int,
    decision_id: uuid.UUID,
    successor_item_ids: Sequence[str],
    remaps: Sequence[tuple[str, str, int]],
) -> None:
    """Record the split, its successors and its remaps ``(listing, to item, mapping rev)``."""
    tx.execute(
        "INSERT INTO item_split (tenant_id, catalog_id, split_id, source_item_id,"
        " source_revision, decision_id) VALUES (%s, %s, %s, %s, %s, %s)",
        (tenant_id, catalog_id, split_id, source_item_id, source_revision, decision_id),
    )
    tx.executemany(
        "INSERT INTO item_split_successor (tenant_id, catalog_id, split_id, item_id)"
        " VALUES (%s, %s, %s, %s)",
        [(tenant_id, catalog_id, split_id, item_id) for item_id in successor_item_ids],
    )
    if remaps:
        tx.executemany(
            "INSERT INTO item_split_remap (tenant_id, catalog_id, split_id, listing_id,"
            " to_item_id, mapping_revision) VALUES (%s, %s, %s, %s, %s, %s)",
            [(tenant_id, catalog_id, split_id, *remap) for remap in remaps],
        )
