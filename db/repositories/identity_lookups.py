"""Identity reads of many products at once, one statement each: the capture worker
reads a whole batch's keys, strong identifiers and their holders this way. Each
answers what the one-at-a-time read of ``db.repositories.identity`` of the same name
answers, for every member of the batch.

Each is one index lookup per member (``CROSS JOIN LATERAL``): written as ``IN``
or ``= ANY`` over the batch, the planner scans the catalog's whole range of the
index while its statistics are young (a first large capture), which costs the
catalog's size per batch."""

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
        "SELECT w.class_id, w.generation, w.hash, f.* FROM unnest(%(classes)b::text[],"
        " %(generations)b::int[], %(hashes)b::text[]) AS w(class_id, generation, hash)"
        " CROSS JOIN LATERAL (SELECT k.item_id, k.state, g.status, i.status"
        " FROM identity_key k"
        " JOIN identity_generation g USING (tenant_id, catalog_id, class_id,"
        " identity_generation)"
        " JOIN catalog_item i USING (tenant_id, catalog_id, item_id)"
        " WHERE k.tenant_id = %(t)s AND k.catalog_id = %(c)s AND k.class_id = w.class_id"
        " AND k.identity_generation = w.generation AND k.identity_hash = w.hash"
        " AND ((g.status = 'active' AND k.state = 'active')"
        " OR (g.status = 'retired' AND k.state = 'retired'))) f",
        {
            "t": tenant_id,
            "c": catalog_id,
            "classes": [w[0] for w in wanted],
            "generations": [w[1] for w in wanted],
            "hashes": [w[2] for w in wanted],
        },
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
        "SELECT k.item_id, s.scheme, s.value FROM unnest(%b::text[]) AS k(item_id)"
        " CROSS JOIN LATERAL (SELECT scheme, value FROM identity_strong_id"
        " WHERE tenant_id = %s AND catalog_id = %s AND item_id = k.item_id) s",
        (list(item_ids), tenant_id, catalog_id),
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
        "SELECT p.scheme, p.value, h.item_id"
        " FROM unnest(%b::text[], %b::text[]) AS p(scheme, value) CROSS JOIN LATERAL"
        " (SELECT item_id FROM identity_strong_id WHERE tenant_id = %s AND catalog_id = %s"
        " AND scheme = p.scheme AND value = p.value) h ORDER BY h.item_id",
        ([p[0] for p in pairs], [p[1] for p in pairs], tenant_id, catalog_id),
    ).fetchall()
    found: dict[tuple[str, str], list[str]] = {}
    for scheme, value, item_id in rows:
        found.setdefault((scheme, value), []).append(item_id)
    return found
