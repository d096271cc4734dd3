"""An item's strong identifiers (GTIN, MPN and the like): which it holds and who
holds a value, in the transaction of the resolver's identity facts."""

from __future__ import annotations

from collections.abc import Iterable

from db.insert_ranks import rank
from db.unit_of_work import Transaction

STRONG_IDS = "identity_strong_id"
"""``db.own_rows``' key of an item's strong identifiers (scheme to value), kept for
an item this transaction inserted (it holds none but those the transaction adds)."""


def strong_ids(tx: Transaction, tenant_id: str, catalog_id: str, item_id: str) -> dict[str, str]:
    own: dict[str, str] | None = tx.own.get(STRONG_IDS, (tenant_id, catalog_id, item_id))
    if own is not None:
        return dict(own)
    rows = tx.execute(
        "SELECT scheme, value FROM identity_strong_id"
        " WHERE tenant_id = %s AND catalog_id = %s AND item_id = %s",
        (tenant_id, catalog_id, item_id),
    ).fetchall()
    return {r[0]: r[1] for r in rows}


def strong_id_holders(
    tx: Transaction, tenant_id: str, catalog_id: str, scheme: str, value: str
) -> list[str]:
    rows = tx.execute(
        "SELECT item_id FROM identity_strong_id WHERE tenant_id = %s AND catalog_id = %s"
        " AND scheme = %s AND value = %s ORDER BY item_id",
        (tenant_id, catalog_id, scheme, value),
    ).fetchall()
    return [r[0] for r in rows]


def insert_strong_ids(
    tx: Transaction, tenant_id: str, catalog_id: str, pairs: Iterable[tuple[str, str, str]]
) -> None:
    """Record ``(item_id, scheme, value)`` triples; an item's first value per scheme
    stays (a differing later one is ignored here; the caller checks if it must).
    Deferred: nothing is read back (an item this transaction inserted keeps its
    values in ``tx.own``)."""
    triples = list(pairs)
    if not triples:
        return
    for item_id, scheme, value in triples:
        own = tx.own.get(STRONG_IDS, (tenant_id, catalog_id, item_id))
        if own is not None:
            own.setdefault(scheme, value)
    tx.defer_rows(  # several decisions' may go in one statement
        "INSERT INTO identity_strong_id (tenant_id, catalog_id, item_id, scheme, value)"
        " SELECT %(t)s, %(c)s, x.i, x.s, x.v"
        " FROM unnest(%(items)b::text[], %(schemes)b::text[], %(values)b::text[]) AS x(i, s, v)"
        " ON CONFLICT (tenant_id, catalog_id, item_id, scheme) DO NOTHING",
        {
            "t": tenant_id,
            "c": catalog_id,
            "items": [t[0] for t in triples],
            "schemes": [t[1] for t in triples],
            "values": [t[2] for t in triples],
        },
        ("items", "schemes", "values"),
        rank("identity_strong_id"),
    )
