"""SQL for classes, attribute definitions and attribute values, run inside a Unit of
Work's transaction (or a read-only snapshot for the operator API's reads)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from db.unit_of_work import Transaction

MAX_LINEAGE = 64
"""How far up a class lineage is followed. Classes are immutable and a new class's
parent must already exist, so the domain cannot make a cycle; the bound only keeps a
hand-edited cycle from looping."""


@dataclass(frozen=True, slots=True)
class ClassRow:
    class_id: str
    parent_class_id: str | None
    decision_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class DefinitionRow:
    attribute_key: str
    version: int
    label: str
    value_type: str
    allowed_values: tuple[str, ...]
    applies_to: tuple[str, ...]
    status: str
    revision: int
    decision_id: uuid.UUID
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ValueRow:
    item_id: str
    attribute_key: str
    definition_version: int
    value: str
    item_revision: int
    revision: int
    decision_id: uuid.UUID
    updated_at: datetime


# --- classes -------------------------------------------------------------------------


def get_class(tx: Transaction, tenant_id: str, catalog_id: str, class_id: str) -> ClassRow | None:
    row = tx.execute(
        "SELECT class_id, parent_class_id, decision_id FROM catalog_class"
        " WHERE tenant_id = %s AND catalog_id = %s AND class_id = %s",
        (tenant_id, catalog_id, class_id),
    ).fetchone()
    return ClassRow(*row) if row else None


def insert_class(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    class_id: str,
    parent_class_id: str | None,
    decision_id: uuid.UUID,
) -> None:
    """Insert a class; raises ``UniqueViolation`` if it exists, ``ForeignKeyViolation``
    if the parent is not a registered class."""
    tx.execute(
        "INSERT INTO catalog_class (tenant_id, catalog_id, class_id, parent_class_id,"
        " decision_id) VALUES (%s, %s, %s, %s, %s)",
        (tenant_id, catalog_id, class_id, parent_class_id, decision_id),
    )


def lineage(tx: Transaction, tenant_id: str, catalog_id: str, class_id: str) -> list[str]:
    """``class_id`` and its ancestors, nearest first. An unregistered class is its own
    whole lineage (it has no parents)."""
    rows = tx.execute(
        "WITH RECURSIVE up(class_id, depth) AS ("
        " SELECT %(class)s::text, 0"
        " UNION ALL"
        " SELECT c.parent_class_id, up.depth + 1 FROM catalog_class c JOIN up"
        "  ON c.tenant_id = %(t)s AND c.catalog_id = %(c)s AND c.class_id = up.class_id"
        " WHERE c.parent_class_id IS NOT NULL AND up.depth < %(max)s)"
        " SELECT class_id FROM up ORDER BY depth",
        {"t": tenant_id, "c": catalog_id, "class": class_id, "max": MAX_LINEAGE},
    ).fetchall()
    return list(dict.fromkeys(r[0] for r in rows))


def all_classes(tx: Transaction, tenant_id: str, catalog_id: str) -> list[ClassRow]:
    rows = tx.execute(
        "SELECT class_id, parent_class_id, decision_id FROM catalog_class"
        " WHERE tenant_id = %s AND catalog_id = %s ORDER BY class_id",
        (tenant_id, catalog_id),
    ).fetchall()
    return [ClassRow(*r) for r in rows]


# --- definitions ---------------------------------------------------------------------

_DEFINITION = (
    "SELECT d.attribute_key, d.version, d.label, d.value_type, d.allowed_values,"
    " coalesce((SELECT array_agg(a.class_id ORDER BY a.class_id) FROM attribute_applicability a"
    "  WHERE a.tenant_id = d.tenant_id AND a.catalog_id = d.catalog_id"
    "  AND a.attribute_key = d.attribute_key AND a.version = d.version), '{}'),"
    " d.status, d.revision, d.decision_id, d.created_at, d.updated_at"
    " FROM attribute_definition d"
)


def _definition(row: Sequence[Any]) -> DefinitionRow:
    key, version, label, value_type, allowed, applies, *rest = row
    return DefinitionRow(key, version, label, value_type, tuple(allowed), tuple(applies), *rest)


def get_definition(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    attribute_key: str,
    version: int,
    *,
    lock: str | None = None,
) -> DefinitionRow | None:
    """One definition version with its applicability; ``lock`` is ``"share"`` or
    ``"update"`` to hold that row lock on the definition until the transaction ends."""
    suffix = {None: "", "share": " FOR SHARE OF d", "update": " FOR UPDATE OF d"}[lock]
    row = tx.execute(
        _DEFINITION + " WHERE d.tenant_id = %s AND d.catalog_id = %s AND d.attribute_key = %s"
        " AND d.version = %s" + suffix,
        (tenant_id, catalog_id, attribute_key, version),
    ).fetchone()
    return _definition(row) if row else None


def get_definitions(
    tx: Transaction, tenant_id: str, catalog_id: str, versions: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], DefinitionRow]:
    """``get_definition(..., lock="share")`` for several ``(key, version)`` pairs in one
    statement, locked in key order."""
    if not versions:
        return {}
    pairs = sorted(set(versions))
    rows = tx.execute(
        _DEFINITION + " WHERE d.tenant_id = %s AND d.catalog_id = %s"
        " AND (d.attribute_key, d.version) IN"
        " (SELECT * FROM unnest(%b::text[], %b::int4[]))"
        " ORDER BY d.attribute_key, d.version FOR SHARE OF d",
        (tenant_id, catalog_id, [k for k, _ in pairs], [v for _, v in pairs]),
    ).fetchall()
    found = [_definition(r) for r in rows]
    return {(d.attribute_key, d.version): d for d in found}


def list_definitions(
    tx: Transaction, tenant_id: str, catalog_id: str, attribute_key: str | None = None
) -> list[DefinitionRow]:
    """Every definition version of the catalog (or of one key), by key then version."""
    rows = tx.execute(
        _DEFINITION + " WHERE d.tenant_id = %s AND d.catalog_id = %s"
        " AND (%s::text IS NULL OR d.attribute_key = %s)"
        " ORDER BY d.attribute_key, d.version",
        (tenant_id, catalog_id, attribute_key, attribute_key),
    ).fetchall()
    return [_definition(r) for r in rows]


def insert_definition(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    attribute_key: str,
    version: int,
    label: str,
    value_type: str,
    allowed_values: Sequence[str],
    applies_to: Sequence[str],
    published: bool,
    decision_id: uuid.UUID,
) -> None:
    """Insert a definition version at revision 1 with its applicability.

    1. insert the version as a draft;
    2. insert its applicability rows;
    3. if it is defined published, mark it so (still revision 1).
    PostgreSQL freezes a published version's applicability, so the rows of step 2 must
    exist before step 3. All of it is one transaction: no one sees the draft.
    Raises ``UniqueViolation`` if the version exists.
    """
    scope = {"t": tenant_id, "c": catalog_id, "k": attribute_key, "v": version}
    tx.execute(
        "INSERT INTO attribute_definition (tenant_id, catalog_id, attribute_key, version,"
        " label, value_type, allowed_values, status, revision, decision_id)"
        " VALUES (%(t)s, %(c)s, %(k)s, %(v)s, %(label)s, %(type)s, %(allowed)s, 'draft', 1,"
        " %(d)s)",
        {
            **scope,
            "label": label,
            "type": value_type,
            "allowed": list(allowed_values),
            "d": decision_id,
        },
    )
    tx.execute(
        "INSERT INTO attribute_applicability (tenant_id, catalog_id, attribute_key, version,"
        " class_id) SELECT %(t)s, %(c)s, %(k)s, %(v)s, unnest(%(classes)b::text[])",
        {**scope, "classes": list(applies_to)},
    )
    if published:
        tx.execute(
            "UPDATE attribute_definition SET status = 'published' WHERE tenant_id = %(t)s"
            " AND catalog_id = %(c)s AND attribute_key = %(k)s AND version = %(v)s",
            scope,
        )


def publish_definition(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    attribute_key: str,
    version: int,
    decision_id: uuid.UUID,
) -> int | None:
    """Move a draft to published with ``revision + 1``; returns the new revision, or
    None if the version is missing or not a draft (nothing changes then)."""
    row = tx.execute(
        "UPDATE attribute_definition SET status = 'published', revision = revision + 1,"
        " decision_id = %s, updated_at = now() WHERE tenant_id = %s AND catalog_id = %s"
        " AND attribute_key = %s AND version = %s AND status = 'draft' RETURNING revision",
        (decision_id, tenant_id, catalog_id, attribute_key, version),
    ).fetchone()
    return int(row[0]) if row else None


# --- values --------------------------------------------------------------------------

_VALUE = (
    "SELECT item_id, attribute_key, definition_version, value, item_revision, revision,"
    " decision_id, updated_at FROM attribute_value"
)


def save_value(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    item_id: str,
    attribute_key: str,
    definition_version: int,
    value: str,
    item_revision: int,
    decision_id: uuid.UUID,
) -> int:
    """Insert or update the item's value of the key with ``revision + 1``; returns the
    new revision. The deferred INV-07 trigger re-checks the row at COMMIT."""
    row = tx.execute(
        "INSERT INTO attribute_value (tenant_id, catalog_id, item_id, attribute_key,"
        " definition_version, value, item_revision, revision, decision_id)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, 1, %s)"
        " ON CONFLICT (tenant_id, catalog_id, item_id, attribute_key) DO UPDATE SET"
        " definition_version = excluded.definition_version, value = excluded.value,"
        " item_revision = excluded.item_revision, decision_id = excluded.decision_id,"
        " revision = attribute_value.revision + 1, updated_at = now()"
        " RETURNING revision",
        (
            tenant_id,
            catalog_id,
            item_id,
            attribute_key,
            definition_version,
            value,
            item_revision,
            decision_id,
        ),
    ).fetchone()
    assert row is not None
    return int(row[0])


@dataclass(frozen=True, slots=True)
class ValueWrite:
    """One item's value of one key, as ``save_values`` writes it."""

    item_id: str
    attribute_key: str
    definition_version: int
    value: str
    item_revision: int


def save_values(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    writes: Sequence[ValueWrite],
    decision_id: uuid.UUID,
) -> dict[tuple[str, str], int]:
    """``save_value`` for several distinct (item, key) pairs in one statement; returns
    the new revision by (item id, key)."""
    if not writes:
        return {}
    rows = tx.execute(
        "INSERT INTO attribute_value (tenant_id, catalog_id, item_id, attribute_key,"
        " definition_version, value, item_revision, revision, decision_id)"
        " SELECT %(t)s, %(c)s, r.item_id, r.attribute_key, r.version, r.value,"
        " r.item_revision, 1, %(d)s"
        " FROM unnest(%(items)b::text[], %(keys)b::text[], %(versions)b::int4[],"
        " %(values)b::text[], %(item_revisions)b::int4[])"
        " AS r(item_id, attribute_key, version, value, item_revision)"
        " ON CONFLICT (tenant_id, catalog_id, item_id, attribute_key) DO UPDATE SET"
        " definition_version = excluded.definition_version, value = excluded.value,"
        " item_revision = excluded.item_revision, decision_id = excluded.decision_id,"
        " revision = attribute_value.revision + 1, updated_at = now()"
        " RETURNING item_id, attribute_key, revision",
        {
            "t": tenant_id,
            "c": catalog_id,
            "d": decision_id,
            "items": [w.item_id for w in writes],
            "keys": [w.attribute_key for w in writes],
            "versions": [w.definition_version for w in writes],
            "values": [w.value for w in writes],
            "item_revisions": [w.item_revision for w in writes],
        },
    ).fetchall()
    return {(r[0], r[1]): int(r[2]) for r in rows}


def values_of_item(
    tx: Transaction, tenant_id: str, catalog_id: str, item_id: str
) -> list[ValueRow]:
    """The item's current values, by key."""
    rows = tx.execute(
        _VALUE + " WHERE tenant_id = %s AND catalog_id = %s AND item_id = %s"
        " ORDER BY attribute_key",
        (tenant_id, catalog_id, item_id),
    ).fetchall()
    return [ValueRow(*r) for r in rows]


def all_values(tx: Transaction, tenant_id: str, catalog_id: str) -> list[ValueRow]:
    rows = tx.execute(
        _VALUE + " WHERE tenant_id = %s AND catalog_id = %s ORDER BY item_id, attribute_key",
        (tenant_id, catalog_id),
    ).fetchall()
    return [ValueRow(*r) for r in rows]
