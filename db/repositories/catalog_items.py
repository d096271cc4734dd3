"""SQL for the catalog-item aggregate, run inside a Unit of Work's transaction."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from psycopg.types.json import Jsonb

from db.insert_ranks import rank
from db.own_rows import ABSENT
from db.repositories.strong_ids import STRONG_IDS
from db.row_source import Column, rows_from
from db.unit_of_work import Transaction

_COLUMNS = "item_id, class_id, status, title, parent_item_id, attributes, revision"
_I_COLUMNS = ", ".join(f"i.{c.strip()}" for c in _COLUMNS.split(","))  # of ``_by_keys``


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


TABLE = "catalog_item"


def _known(tx: Transaction, tenant_id: str, catalog_id: str, item_id: str) -> tuple[bool, Any]:
    """Whether this transaction knows the item without reading it (``db.own_rows``),
    and then the item as it wrote it, or None: absent under the cursor lock."""
    row = tx.own.get(TABLE, (tenant_id, catalog_id, item_id))
    if row is None:
        return False, None
    return True, None if row is ABSENT else row


def _wrote(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    writes: Sequence[ItemWrite],
    revisions: dict[str, int],
) -> None:
    """Keep the items ``writes`` wrote at ``revisions`` (those missing were not
    written: a split item)."""
    for w in writes:
        key = (tenant_id, catalog_id, w.item_id)
        revision = revisions.get(w.item_id)
        if revision is None:
            tx.own.forget(TABLE, [key])
            continue
        values = (w.item_id, w.class_id, w.status, w.title, w.parent_item_id)
        row = ItemRow(*values, dict(w.attributes), revision)
        tx.own.put(TABLE, key, row)


def get_for_share(tx: Transaction, tenant_id: str, catalog_id: str, item_id: str) -> ItemRow | None:
    """Read an item and hold a share lock on it until the transaction ends.

    FOR SHARE keeps a concurrent writer from changing or retiring the item while a
    dependent change that relies on its current revision commits. An item this
    transaction wrote is answered from what it wrote: it is locked already; one it
    found absent under the cursor lock is absent. In a unit reading without the cursor
    lock the item is read plainly and share-locked by the unit's write, which fails
    unless it is still at the revision read (``get_many_for_share``).
    """
    known, own = _known(tx, tenant_id, catalog_id, item_id)
    if known:
        return cast(ItemRow | None, own)
    if tx.unlocked:
        return get_many_for_share(tx, tenant_id, catalog_id, [item_id]).get(item_id)
    row = tx.execute(
        f"SELECT {_COLUMNS} FROM catalog_item"
        " WHERE tenant_id = %s AND catalog_id = %s AND item_id = %s FOR SHARE",
        (tenant_id, catalog_id, item_id),
    ).fetchone()
    return _row(row) if row else None


_BY_KEY = (
    " FROM catalog_item i WHERE i.tenant_id = %(t)s AND i.catalog_id = %(c)s AND i.item_id = %(id)s"
)
"""``FROM`` the one item ``%(id)s`` names, as ``i``: with scalars a read is planned
once per connection (primary-key lookups) instead of at every execution, as a read
joining an array is (a fifth of a one-item decision's PostgreSQL CPU went on that).
The cost: a generic plan made while the table held a page or two after a VACUUM
scans it, until the next ANALYZE (autovacuum's, as the table grows) makes the
connection plan it again; on a new deployment whose first catalog grew by 30,000
items in between, a decision's PostgreSQL CPU went from 467 to 2,767 µs until then
(433 µs after). Tables that already hold a catalog are planned by their index."""


def _by_keys(lock: str = "", at_revision: str = "") -> str:
    """``FROM`` the items named by ``%(ids)s`` in ``%(t)s``/``%(c)s``, as ``i``: one
    primary-key lookup per id, in the array's order (``LIMIT 1`` keeps the planner from
    turning it into a scan of the catalog, which it prefers while statistics are young
    and which costs the size of the catalog times the ids). With ``at_revision``, each
    at the revision ``%(revisions)s`` holds at its place."""
    keys = "unnest(%(ids)b::text[], %(revisions)b::int4[]) AS k(item_id, revision)"
    return (
        f" FROM {keys if at_revision else 'unnest(%(ids)b::text[]) AS k(item_id)'}"
        f" CROSS JOIN LATERAL (SELECT {_COLUMNS}, tenant_id, catalog_id FROM catalog_item c"
        " WHERE c.tenant_id = %(t)s AND c.catalog_id = %(c)s AND c.item_id = k.item_id"
        f"{at_revision} LIMIT 1 {lock}) i"
    )


def get_many_for_share(
    tx: Transaction, tenant_id: str, catalog_id: str, item_ids: Sequence[str]
) -> dict[str, ItemRow]:
    """``get_for_share`` for several items in one statement, locked in key order;
    those this transaction wrote are answered from what it wrote, with none."""
    found: dict[str, ItemRow] = {}
    others: list[str] = []
    for item_id in sorted(set(item_ids)):
        known, own = _known(tx, tenant_id, catalog_id, item_id)
        if not known:
            others.append(item_id)
        elif own is not None:
            found[item_id] = own
    if not others:
        return found
    params = {"t": tenant_id, "c": catalog_id, "ids": others, "id": others[0]}
    if not tx.unlocked:
        rows = tx.execute(f"SELECT {_I_COLUMNS}" + _by_keys("FOR SHARE"), params).fetchall()
        found.update((r[0], _row(r)) for r in rows)
        return found
    keys = _BY_KEY if len(others) == 1 else _by_keys()
    read = {r[0]: _row(r) for r in tx.execute(f"SELECT {_I_COLUMNS}{keys}", params)}
    if read:
        # With the unit's write: each item share-locked at the revision read, or the
        # write fails and the unit goes again under the lock. (Those found absent
        # stay absent: no domain writer can add one without moving the cursor.)
        ids = sorted(read)
        query, revisions = _SHARE_ONE, [read[i].revision for i in ids]
        if len(ids) > 1:
            query = f"SELECT i.item_id{_by_keys('FOR SHARE', ' AND c.revision = k.revision')}"
        share = params | {"ids": ids, "id": ids[0], "revisions": revisions, "rev": revisions[0]}
        tx.defer_expected(query, share, len(ids), "the items share-locked at the revisions read")
    return found | read


_SHARE_ONE = (
    "SELECT item_id FROM catalog_item WHERE tenant_id = %(t)s AND catalog_id = %(c)s"
    " AND item_id = %(id)s AND revision = %(rev)s FOR SHARE"
)
"""One item share-locked at a revision, with scalars: PostgreSQL then plans the whole
joined write once per connection (a generic plan of primary-key lookups) instead of
for every decision, as it must when a part joins an array (planning a joined write
at every execution took a quarter to a third of a decision's PostgreSQL CPU). The
same cost as ``_BY_KEY``'s on a table planned while tiny."""


@dataclass(frozen=True, slots=True)
class ItemState:
    """What a new revision of an item must be checked against: its class, its status
    and whether it holds attribute values (a class change could strand them); and
    the revision it is at."""

    class_id: str
    status: str
    has_values: bool
    revision: int


def states(
    tx: Transaction, tenant_id: str, catalog_id: str, item_ids: Sequence[str]
) -> dict[str, ItemState]:
    """The current state of those of ``item_ids`` that exist, in one statement (none
    when every one was found absent under the cursor lock, ``get_many``, or an
    unlocked unit presumes them absent, ``Transaction.presumes_absent``: the caller
    then inserts them with ``insert_new``, whose primary key refuses one that exists,
    and the decision is done again under the lock)."""
    ids = [i for i in item_ids if tx.own.get(TABLE, (tenant_id, catalog_id, i)) is not ABSENT]
    if not ids or tx.presumes_absent(tenant_id, catalog_id):
        return {}
    rows = tx.execute(
        "SELECT i.item_id, i.class_id, i.status, EXISTS (SELECT 1 FROM attribute_value v"
        " WHERE v.tenant_id = i.tenant_id AND v.catalog_id = i.catalog_id"
        " AND v.item_id = i.item_id), i.revision" + (_BY_KEY if len(ids) == 1 else _by_keys()),
        {"t": tenant_id, "c": catalog_id, "ids": ids, "id": ids[0]},
    ).fetchall()
    return {r[0]: ItemState(r[1], r[2], r[3], int(r[4])) for r in rows}


def get(tx: Transaction, tenant_id: str, catalog_id: str, item_id: str) -> ItemRow | None:
    """Read an item without locking it (for reads outside the write path)."""
    row = tx.execute(
        f"SELECT {_COLUMNS} FROM catalog_item"
        " WHERE tenant_id = %s AND catalog_id = %s AND item_id = %s",
        (tenant_id, catalog_id, item_id),
    ).fetchone()
    return _row(row) if row else None


def get_many(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    item_ids: Sequence[str],
    *,
    cursor_locked: bool = False,
) -> dict[str, ItemRow]:
    """``get`` for several items in one statement: those that exist, by id. With
    ``cursor_locked`` (the caller holds the catalog's stream cursor lock) the others
    are recorded absent (``db.own_rows``), so the write path need not look again."""
    if not item_ids:
        return {}
    rows = tx.execute(
        f"SELECT {_I_COLUMNS}" + _by_keys(),
        {"t": tenant_id, "c": catalog_id, "ids": list(item_ids)},
    ).fetchall()
    found = {r[0]: _row(r) for r in rows}
    if cursor_locked:
        for item_id in item_ids:
            if item_id not in found:
                tx.own.put(TABLE, (tenant_id, catalog_id, item_id), ABSENT)
    return found


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
    revision = int(row[0]) if row else None
    write = ItemWrite(item_id, class_id, status, title, parent_item_id, attributes)
    _wrote(tx, tenant_id, catalog_id, [write], {item_id: revision} if revision else {})
    return revision


@dataclass(frozen=True, slots=True)
class ItemWrite:
    """One item's next revision, as ``save_many`` writes it."""

    item_id: str
    class_id: str
    status: str
    title: str
    parent_item_id: str | None
    attributes: dict[str, str]


_ITEM_ROWS = (
    "%(t)s, %(c)s, r.item_id, r.class_id, r.status, r.title, r.parent_item_id,"
    " %(attributes)s::jsonb -> (r.ord - 1)::int"
)
_ITEM_COLUMNS = (
    Column("ids", "item_id", "text"),
    Column("classes", "class_id", "text"),
    Column("statuses", "status", "text"),
    Column("titles", "title", "text"),
    Column("parents", "parent_item_id", "text"),
)
"""The rows ``save_many`` and ``insert_new`` write (``_item_rows``), a list per column,
and the attributes of all of them as one JSON array (one ``json.dumps`` per
statement, not one per item), element k of it the attributes of row k."""


def _item_rows(params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The ``FROM`` item of ``_ITEM_COLUMNS`` (``db.row_source``) and its parameters."""
    return rows_from(_ITEM_COLUMNS, params, "r", ordinality=True)


def save_many(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    writes: Sequence[ItemWrite],
    decision_id: uuid.UUID,
    read_at: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """``save`` for several distinct items in one statement (binary arrays): each gets
    ``revision + 1`` naming the decision. Returns the new revision by item id; an item
    that has been split is left unchanged and missing from the result.

    In a unit reading without the cursor lock, with ``read_at`` (the revision each
    item was read at, all of them existing), the statement goes with the unit's write,
    which fails unless every item was written; the revisions are the ones read, plus
    one (the cursor guarantees nobody wrote them in between)."""
    if not writes:
        return {}
    params, rows = _item_params(tenant_id, catalog_id, decision_id, writes)
    query = (
        "INSERT INTO catalog_item (tenant_id, catalog_id, item_id, class_id, status, title,"
        " parent_item_id, attributes, revision, decision_id)"
        f" SELECT {_ITEM_ROWS}, 1, %(d)s FROM {rows}"
        " ON CONFLICT (tenant_id, catalog_id, item_id) DO UPDATE SET"
        " class_id = excluded.class_id, status = excluded.status, title = excluded.title,"
        " parent_item_id = excluded.parent_item_id, attributes = excluded.attributes,"
        " revision = catalog_item.revision + 1, decision_id = excluded.decision_id,"
        " updated_at = now() WHERE catalog_item.status <> 'split'"
        " RETURNING item_id, revision"
    )
    if tx.unlocked and read_at is not None:
        tx.defer_expected(query, params, len(writes), "the items at the revisions read")
        revisions = {w.item_id: read_at[w.item_id] + 1 for w in writes}
    else:
        revisions = {r[0]: int(r[1]) for r in tx.execute(query, params).fetchall()}
    _wrote(tx, tenant_id, catalog_id, writes, revisions)
    return revisions


def _item_arrays(writes: Sequence[ItemWrite]) -> dict[str, list[Any]]:
    """The ``_ITEM_COLUMNS`` of ``writes``, a list each."""
    return {
        "ids": [w.item_id for w in writes],
        "classes": [w.class_id for w in writes],
        "statuses": [w.status for w in writes],
        "titles": [w.title for w in writes],
        "parents": [w.parent_item_id for w in writes],
    }


def _item_params(
    tenant_id: str, catalog_id: str, decision_id: uuid.UUID, writes: Sequence[ItemWrite]
) -> tuple[dict[str, Any], str]:
    """One decision's items as ``_ITEM_ROWS`` reads them: the parameters (its id once,
    the attributes as one JSON array) and the ``FROM`` item."""
    source, params = _item_rows(
        {
            "t": tenant_id,
            "c": catalog_id,
            "d": decision_id,
            **_item_arrays(writes),
            "attributes": json.dumps([w.attributes for w in writes]),
        }
    )
    return params, source


def insert_new(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    writes: Sequence[ItemWrite],
    decision_id: uuid.UUID,
) -> None:
    """Insert items that do not exist yet, each at revision 1 naming the decision: one
    statement (binary arrays), deferred to the transaction's next round trip, since
    nothing is read back. Only for items the caller has just seen absent while holding
    the stream's cursor lock, which keeps every other writer of the catalog out, so
    none can appear before COMMIT; a plain INSERT then does what ``save_many`` would,
    without its conflict check. Should one exist after all, its primary key refuses
    the statement and the transaction rolls back."""
    if not writes:
        return
    if not tx.late_errors:  # one decision's: its id once, the attributes as one JSON array
        params, rows = _item_params(tenant_id, catalog_id, decision_id, writes)
        tx.defer(
            "INSERT INTO catalog_item (tenant_id, catalog_id, item_id, class_id, status, title,"
            " parent_item_id, attributes, revision, decision_id)"
            f" SELECT {_ITEM_ROWS}, 1, %(d)s FROM {rows}",
            params,
        )
    else:  # joinable with other decisions' new items: a decision id and a JSON value a row
        params = {
            "t": tenant_id,
            "c": catalog_id,
            **_item_arrays(writes),
            "attributes": [Jsonb(w.attributes) for w in writes],
            "decisions": [decision_id] * len(writes),
        }
        tx.defer_rows(
            "INSERT INTO catalog_item (tenant_id, catalog_id, item_id, class_id, status, title,"
            " parent_item_id, attributes, revision, decision_id)"
            " SELECT %(t)s, %(c)s, r.item_id, r.class_id, r.status, r.title, r.parent_item_id,"
            " r.attributes, 1, r.decision_id FROM unnest(%(ids)b::text[], %(classes)b::text[],"
            " %(statuses)b::text[], %(titles)b::text[], %(parents)b::text[],"
            " %(attributes)b::jsonb[], %(decisions)b::uuid[]) AS r(item_id, class_id, status,"
            " title, parent_item_id, attributes, decision_id)",
            params,
            ("ids", "classes", "statuses", "titles", "parents", "attributes", "decisions"),
            rank(TABLE),
        )
    _wrote(tx, tenant_id, catalog_id, writes, {w.item_id: 1 for w in writes})
    for w in writes:  # a new item holds no strong identifiers yet
        tx.own.put(STRONG_IDS, (tenant_id, catalog_id, w.item_id), {})


def all_items(tx: Transaction, tenant_id: str, catalog_id: str) -> list[ItemRow]:
    rows = tx.execute(
        f"SELECT {_COLUMNS} FROM catalog_item WHERE tenant_id = %s AND catalog_id = %s"
        " ORDER BY item_id",
        (tenant_id, catalog_id),
    ).fetchall()
    return [_row(r) for r in rows]
