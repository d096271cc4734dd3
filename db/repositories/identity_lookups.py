"""Identity reads of many products at once, one statement each: the capture worker
reads a whole batch's keys, strong identifiers and their holders this way. Each
answers what the one-at-a-time read of ``db.repositories.identity`` of the same name
answers, for every member of the batch."""

from __future__ import annotations

from collections.abc import Sequence

from db.repositories.identity import KeyMatch
from db.unit_of_work import Transaction


def find_keys(
    tx: Transaction, tenant_id: str, catalog_id: str, wanted: Sequence[tuple[str, int, str]]
) -> dict[tuple[str, int, str], KeyMatch]:
    """``find_key`` for several (class, generation, hash) triples of one catalog in one
    statement: the servable keys found, by triple."""
    if not wanted:
        return {}
    rows = tx.execute(
        "SELECT k.class_id, k.identity_generation, k.identity_hash,"
        " k.item_id, k.state, g.status, i.status FROM identity_key k"
        " JOIN identity_generation g USING (tenant_id, catalog_id, class_id,"
        " identity_generation)"
        " JOIN catalog_item i USING (tenant_id, catalog_id, item_id)"
        " WHERE k.tenant_id = %s AND k.catalog_id = %s"
        " AND (k.class_id, k.identity_generation, k.identity_hash) IN"
        " (SELECT * FROM unnest(%s::text[], %s::int[], %s::text[]))"
        " AND ((g.status = 'active' AND k.state = 'active')"
        " OR (g.status = 'retired' AND k.state = 'retired'))",
        (
            tenant_id,
            catalog_id,
            [w[0] for w in wanted],
            [w[1] for w in wanted],
            [w[2] for w in wanted],
        ),
    ).fetchall()
    found: dict[tuple[str, int, str], KeyMatch] = {}
    for r in rows:
        triple = (r[0], int(r[1]), r[2])
        assert triple not in found, r  # one servable key per hash, as in ``find_key``
        found[triple] = KeyMatch(*r[3:])
    return found


def strong_ids_of_items(
    tx: Transaction, tenant_id: str, catalog_id: str, item_ids: Sequence[str]
) -> dict[str, dict[str, str]]:
    """``strong_ids`` of several items in one statement (an item without any is
    absent)."""
    if not item_ids:
        return {}
    rows = tx.execute(
        "SELECT item_id, scheme, value FROM identity_strong_id"
        " WHERE tenant_id = %s AND catalog_id = %s AND item_id = ANY(%s::text[])",
        (tenant_id, catalog_id, list(item_ids)),
    ).fetchall()
    found: dict[str, dict[str, str]] = {}
    for item_id, scheme, value in rows:
        found.setdefault(item_id, {})[scheme] = value
    return found


def holders_of(
    tx: Transaction, tenant_id: str, catalog_id: str, pairs: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], list[str]]:
    """``strong_id_holders`` of several (scheme, value) pairs in one statement (a pair
    nobody holds is absent)."""
    if not pairs:
        return {}
    rows = tx.execute(
        "SELECT scheme, value, item_id FROM identity_strong_id"
        " WHERE tenant_id = %s AND catalog_id = %s AND (scheme, value) IN"
        " (SELECT * FROM unnest(%s::text[], %s::text[])) ORDER BY item_id",
        (tenant_id, catalog_id, [p[0] for p in pairs], [p[1] for p in pairs]),
    ).fetchall()
    found: dict[tuple[str, str], list[str]] = {}
    for scheme, value, item_id in rows:
        found.setdefault((scheme, value), []).append(item_id)
    return found
