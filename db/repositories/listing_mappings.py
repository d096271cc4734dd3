"""SQL for listing mappings, run inside a Unit of Work's transaction."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from db.insert_ranks import rank
from db.own_rows import ABSENT
from db.unit_of_work import Transaction


@dataclass(frozen=True, slots=True)
class MappingRow:
    listing_id: str
    item_id: str
    item_revision: int
    decision_id: uuid.UUID
    revision: int


def save(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    listing_id: str,
    item_id: str,
    item_revision: int,
    decision_id: uuid.UUID,
) -> int:
    """Insert or update the mapping with ``revision + 1``; returns the new revision."""
    row = tx.execute(
        "INSERT INTO listing_mapping (tenant_id, catalog_id, listing_id, item_id,"
        " item_revision, decision_id, revision) VALUES (%s, %s, %s, %s, %s, %s, 1)"
        " ON CONFLICT (tenant_id, catalog_id, listing_id) DO UPDATE SET"
        " item_id = excluded.item_id, item_revision = excluded.item_revision,"
        " decision_id = excluded.decision_id, revision = listing_mapping.revision + 1,"
        " updated_at = now() RETURNING revision",
        (tenant_id, catalog_id, listing_id, item_id, item_revision, decision_id),
    ).fetchone()
    assert row is not None
    tx.own.forget(TABLE, [(tenant_id, catalog_id, listing_id)])
    return int(row[0])


@dataclass(frozen=True, slots=True)
class MappingWrite:
    """One listing's next mapping, as ``save_many`` writes it."""

    listing_id: str
    item_id: str
    item_revision: int


def save_many(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    writes: Sequence[MappingWrite],
    decision_id: uuid.UUID,
) -> dict[str, int]:
    """``save`` for several distinct listings in one statement (binary arrays);
    returns the new revision by listing id. Those found absent under the cursor
    lock (``get_many``) are inserted at revision 1 in a statement of their own,
    deferred, since nothing need be read back; should one exist after all, its
    primary key refuses it and the transaction rolls back."""
    if not writes:
        return {}
    keys = {w.listing_id: (tenant_id, catalog_id, w.listing_id) for w in writes}
    new = [w for w in writes if tx.own.get(TABLE, keys[w.listing_id]) is ABSENT]
    rest = [w for w in writes if tx.own.get(TABLE, keys[w.listing_id]) is not ABSENT]
    tx.own.forget(TABLE, keys.values())
    revisions = {w.listing_id: 1 for w in new}
    if new:  # several decisions' new mappings may go in one statement
        columns = ("listings", "items", "revisions", "decisions")
        params = _params(tenant_id, catalog_id, new, decision_id)
        tx.defer_rows(_INSERT, params, columns, rank(TABLE))
    if rest:
        found = tx.execute(
            _INSERT + " ON CONFLICT (tenant_id, catalog_id, listing_id) DO UPDATE SET"
            " item_id = excluded.item_id, item_revision = excluded.item_revision,"
            " decision_id = excluded.decision_id, revision = listing_mapping.revision + 1,"
            " updated_at = now() RETURNING listing_id, revision",
            _params(tenant_id, catalog_id, rest, decision_id),
        ).fetchall()
        revisions.update((r[0], int(r[1])) for r in found)
    return {w.listing_id: revisions[w.listing_id] for w in writes}


TABLE = "listing_mapping"
_INSERT = (
    "INSERT INTO listing_mapping (tenant_id, catalog_id, listing_id, item_id,"
    " item_revision, decision_id, revision)"
    " SELECT %(t)s, %(c)s, r.listing_id, r.item_id, r.item_revision, r.decision_id, 1"
    " FROM unnest(%(listings)b::text[], %(items)b::text[], %(revisions)b::int4[],"
    " %(decisions)b::uuid[]) AS r(listing_id, item_id, item_revision, decision_id)"
)


def _params(
    tenant_id: str, catalog_id: str, writes: Sequence[MappingWrite], decision_id: uuid.UUID
) -> dict[str, object]:
    return {
        "t": tenant_id,
        "c": catalog_id,
        "listings": [w.listing_id for w in writes],
        "items": [w.item_id for w in writes],
        "revisions": [w.item_revision for w in writes],
        "decisions": [decision_id] * len(writes),
    }


def for_item_for_update(
    tx: Transaction, tenant_id: str, catalog_id: str, item_id: str
) -> list[MappingRow]:
    """The mappings targeting an item, locked until the transaction ends.

    A split moves them to its successors: the lock keeps any writer (one that did not
    take the stream's cursor lock included) from remapping one of them meanwhile, so
    the split's check that its remaps cover every listing stays true until COMMIT.
    """
    rows = tx.execute(
        "SELECT listing_id, item_id, item_revision, decision_id, revision FROM listing_mapping"
        " WHERE tenant_id = %s AND catalog_id = %s AND item_id = %s"
        " ORDER BY listing_id FOR UPDATE",
        (tenant_id, catalog_id, item_id),
    ).fetchall()
    return [MappingRow(*r) for r in rows]


def get(tx: Transaction, tenant_id: str, catalog_id: str, listing_id: str) -> MappingRow | None:
    row = tx.execute(
        "SELECT listing_id, item_id, item_revision, decision_id, revision FROM listing_mapping"
        " WHERE tenant_id = %s AND catalog_id = %s AND listing_id = %s",
        (tenant_id, catalog_id, listing_id),
    ).fetchone()
    return MappingRow(*row) if row else None


def get_many(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    listing_ids: Sequence[str],
    *,
    cursor_locked: bool = False,
) -> dict[str, MappingRow]:
    """``get`` for several listings in one statement: the mapped ones, by listing.
    With ``cursor_locked`` (the caller holds the catalog's stream cursor lock) the
    others are recorded absent (``db.own_rows``): ``save_many`` inserts them."""
    if not listing_ids:
        return {}
    # One primary-key lookup per listing (``LIMIT 1``): with ``listing_id = ANY(...)``
    # a cached plan made while the table was small scans all of it.
    rows = tx.execute(
        "SELECT m.* FROM unnest(%b::text[]) AS k(listing_id) CROSS JOIN LATERAL"
        " (SELECT listing_id, item_id, item_revision, decision_id, revision"
        " FROM listing_mapping WHERE tenant_id = %s AND catalog_id = %s"
        " AND listing_id = k.listing_id LIMIT 1) m",
        (list(listing_ids), tenant_id, catalog_id),
    ).fetchall()
    found = {r[0]: MappingRow(*r) for r in rows}
    if cursor_locked:
        for listing_id in listing_ids:
            if listing_id not in found:
                tx.own.put(TABLE, (tenant_id, catalog_id, listing_id), ABSENT)
    return found
