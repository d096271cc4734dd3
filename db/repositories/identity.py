"""SQL for identity generations, identity keys, collision candidates and strong
identifiers (INV-02), run inside a Unit of Work's transaction or a read snapshot."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from db.insert_ranks import rank
from db.unit_of_work import Transaction


@dataclass(frozen=True, slots=True)
class GenerationKey:
    """Names one generation: the five columns' first four."""

    tenant_id: str
    catalog_id: str
    class_id: str
    generation: int

    def params(self) -> tuple[str, str, str, int]:
        return (self.tenant_id, self.catalog_id, self.class_id, self.generation)


@dataclass(frozen=True, slots=True)
class GenerationRow:
    key: GenerationKey
    rule_fields: tuple[str, ...]
    status: str
    revision: int
    item_count: int | None
    created_at: datetime
    backfilled_at: datetime | None
    activated_at: datetime | None
    retired_at: datetime | None
    activation_decision_id: uuid.UUID | None


@dataclass(frozen=True, slots=True)
class CollisionRow:
    identity_hash: str
    candidate_item_ids: tuple[str, ...]
    holder_item_id: str | None
    decision_id: uuid.UUID | None
    resolved_at: datetime | None


@dataclass(frozen=True, slots=True)
class KeyMatch:
    """The key a lookup found, with its generation's status and its item's."""

    item_id: str
    key_state: str
    generation_status: str
    item_status: str


_GEN_COLUMNS = (
    "tenant_id, catalog_id, class_id, identity_generation, rule_fields, status, revision,"
    " item_count, created_at, backfilled_at, activated_at, retired_at, activation_decision_id"
)
_G_COLUMNS = ", ".join(f"g.{c}" for c in _GEN_COLUMNS.split(", "))
"""``_GEN_COLUMNS`` of a generation read as ``g`` in a join."""
_GEN_WHERE = "tenant_id = %s AND catalog_id = %s AND class_id = %s AND identity_generation = %s"
_CLASS_WHERE = "tenant_id = %s AND catalog_id = %s AND class_id = %s"


def _generation(values: Any) -> GenerationRow:
    tenant, catalog, class_id, generation, fields, *rest = values
    return GenerationRow(GenerationKey(tenant, catalog, class_id, generation), tuple(fields), *rest)


# --- generations ---------------------------------------------------------------------


def pinned_for_share(
    tx: Transaction, tenant_id: str, catalog_id: str, capture_id: uuid.UUID, class_ids: list[str]
) -> dict[str, GenerationRow]:
    """The generations ``capture_id``'s classes ``class_ids`` are pinned to
    (``capture_identity_pin``), by class, each share-locked until the transaction ends
    (as ``assign_identity`` locks the one it writes a key in). A class not pinned yet,
    or pinned to no generation, is left out."""
    rows = tx.execute(
        f"SELECT {_G_COLUMNS}"
        " FROM capture_identity_pin p JOIN identity_generation g"
        " ON g.tenant_id = p.tenant_id AND g.catalog_id = %s AND g.class_id = p.class_id"
        " AND g.identity_generation = p.identity_generation"
        " WHERE p.tenant_id = %s AND p.capture_id = %s AND p.class_id = ANY(%b::text[])"
        " ORDER BY g.class_id FOR SHARE OF g",
        (catalog_id, tenant_id, capture_id, class_ids),
    ).fetchall()
    return {r[2]: _generation(r) for r in rows}


def insert_next_generation(
    tx: Transaction, tenant_id: str, catalog_id: str, class_id: str, rule_fields: Sequence[str]
) -> GenerationRow:
    """Insert the class's next generation, status ``backfilling``, revision 1.

    No lock hands out the number: two concurrent creations of the same class compute
    the same ``max + 1`` and the primary key refuses the second
    (``psycopg.errors.UniqueViolation``), which the caller reports as a conflict.
    """
    row = tx.execute(
        f"INSERT INTO identity_generation (tenant_id, catalog_id, class_id,"
        f" identity_generation, rule_fields, status, revision)"
        f" SELECT %(t)s, %(c)s, %(k)s, coalesce(max(identity_generation), 0) + 1, %(f)s,"
        f" 'backfilling', 1 FROM identity_generation"
        f" WHERE tenant_id = %(t)s AND catalog_id = %(c)s AND class_id = %(k)s"
        f" RETURNING {_GEN_COLUMNS}",
        {"t": tenant_id, "c": catalog_id, "k": class_id, "f": list(rule_fields)},
    ).fetchone()
    assert row is not None
    return _generation(row)


def get_generation(
    tx: Transaction, key: GenerationKey, lock: Literal["update", "share"] | None = None
) -> GenerationRow | None:
    """Read a generation; ``lock`` holds a row lock on it until the transaction ends
    (the caller's comment says what it serializes)."""
    suffix = {None: "", "update": " FOR UPDATE", "share": " FOR SHARE"}[lock]
    row = tx.execute(
        f"SELECT {_GEN_COLUMNS} FROM identity_generation WHERE {_GEN_WHERE}{suffix}",
        key.params(),
    ).fetchone()
    return _generation(row) if row else None


def active_generation_for_update(
    tx: Transaction, tenant_id: str, catalog_id: str, class_id: str
) -> GenerationRow | None:
    row = tx.execute(
        f"SELECT {_GEN_COLUMNS} FROM identity_generation WHERE {_CLASS_WHERE}"
        " AND status = 'active' FOR UPDATE",
        (tenant_id, catalog_id, class_id),
    ).fetchone()
    return _generation(row) if row else None


def generation_at(
    tx: Transaction, tenant_id: str, catalog_id: str, class_id: str, at: datetime
) -> GenerationRow | None:
    """The generation whose active window ``[activated_at, retired_at)`` contains
    ``at``; the exclusion constraint leaves at most one."""
    row = tx.execute(
        f"SELECT {_GEN_COLUMNS} FROM identity_generation WHERE {_CLASS_WHERE}"
        " AND activated_at IS NOT NULL"
        " AND tstzrange(activated_at, retired_at) @> %s::timestamptz",
        (tenant_id, catalog_id, class_id, at),
    ).fetchone()
    return _generation(row) if row else None


def list_generations(
    tx: Transaction, tenant_id: str, catalog_id: str, class_id: str | None = None
) -> list[GenerationRow]:
    """A catalog's generations (of one class if given), by class then number."""
    rows = tx.execute(
        f"SELECT {_GEN_COLUMNS} FROM identity_generation"
        " WHERE tenant_id = %s AND catalog_id = %s AND (%s::text IS NULL OR class_id = %s)"
        " ORDER BY class_id, identity_generation",
        (tenant_id, catalog_id, class_id, class_id),
    ).fetchall()
    return [_generation(r) for r in rows]


def mark_backfilled(tx: Transaction, key: GenerationKey, item_count: int) -> int:
    """Status ``ready``, the backfill's time and item count; returns the new revision."""
    row = tx.execute(
        "UPDATE identity_generation SET status = 'ready', backfilled_at = now(),"
        f" item_count = %s, revision = revision + 1 WHERE {_GEN_WHERE} RETURNING revision",
        (item_count, *key.params()),
    ).fetchone()
    assert row is not None
    return int(row[0])


def bump_revision(tx: Transaction, key: GenerationKey) -> int:
    row = tx.execute(
        f"UPDATE identity_generation SET revision = revision + 1 WHERE {_GEN_WHERE}"
        " RETURNING revision",
        key.params(),
    ).fetchone()
    assert row is not None
    return int(row[0])


def activate(tx: Transaction, key: GenerationKey, decision_id: uuid.UUID, at: datetime) -> int:
    """The generation becomes active at ``at`` and its ready keys active; returns the
    new revision."""
    row = tx.execute(
        "UPDATE identity_generation SET status = 'active', activated_at = %s,"
        " activation_decision_id = %s, revision = revision + 1"
        f" WHERE {_GEN_WHERE} RETURNING revision",
        (at, decision_id, *key.params()),
    ).fetchone()
    assert row is not None
    tx.execute(
        "UPDATE identity_key SET state = 'active', updated_at = now()"
        f" WHERE {_GEN_WHERE} AND state = 'ready'",
        key.params(),
    )
    return int(row[0])


def retire(tx: Transaction, key: GenerationKey, at: datetime) -> None:
    """The generation is retired at ``at`` and its active keys retired."""
    tx.execute(
        "UPDATE identity_generation SET status = 'retired', retired_at = %s,"
        f" revision = revision + 1 WHERE {_GEN_WHERE}",
        (at, *key.params()),
    )
    tx.execute(
        "UPDATE identity_key SET state = 'retired', updated_at = now()"
        f" WHERE {_GEN_WHERE} AND state = 'active'",
        key.params(),
    )


def clock(tx: Transaction) -> datetime:
    """The wall clock now, not the transaction's start (``now()``): a transaction
    that waited for a lock must not stamp a time before the commit it waited for."""
    row = tx.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


# --- backfill ------------------------------------------------------------------------


def active_items_of_class(
    tx: Transaction, tenant_id: str, catalog_id: str, class_id: str
) -> list[tuple[str, dict[str, str]]]:
    """``(item_id, attributes)`` of every active item of the class, by item id."""
    rows = tx.execute(
        "SELECT item_id, attributes FROM catalog_item WHERE tenant_id = %s AND catalog_id = %s"
        " AND class_id = %s AND status = 'active' ORDER BY item_id",
        (tenant_id, catalog_id, class_id),
    ).fetchall()
    return [(r[0], dict(r[1])) for r in rows]


def attribute_names_of_class(
    tx: Transaction, tenant_id: str, catalog_id: str, class_id: str
) -> frozenset[str]:
    """The attribute names any active item of the class carries."""
    rows = tx.execute(
        "SELECT DISTINCT jsonb_object_keys(attributes) FROM catalog_item"
        " WHERE tenant_id = %s AND catalog_id = %s AND class_id = %s AND status = 'active'",
        (tenant_id, catalog_id, class_id),
    ).fetchall()
    return frozenset(r[0] for r in rows)


def clear_backfill(tx: Transaction, key: GenerationKey) -> None:
    """Delete a never-activated generation's keys, candidates and collisions.

    Candidates and collisions reference each other (a collision's holder is one of
    its candidates), so both go in one statement: PostgreSQL checks the foreign keys
    at its end. A trigger refuses to delete any key that is not ``ready``.
    """
    params = key.params()
    tx.execute(
        f"WITH candidates AS (DELETE FROM identity_candidate WHERE {_GEN_WHERE})"
        f" DELETE FROM identity_collision WHERE {_GEN_WHERE}",
        (*params, *params),
    )
    tx.execute(f"DELETE FROM identity_key WHERE {_GEN_WHERE}", params)


def insert_keys(
    tx: Transaction,
    key: GenerationKey,
    holders: Mapping[str, str],
    state: Literal["ready", "active"],
    decision_id: uuid.UUID | None = None,
) -> None:
    """Insert one key per ``item_id → identity_hash``.

    Raises ``psycopg.errors.UniqueViolation`` when a ready or active key already has
    the hash in this generation (INV-02), or the item already has a key in it (in a
    transaction letting errors surface late, a later statement raises it:
    ``Transaction.defer_checked``). A concurrent insert of the same hash waits for
    the other transaction and fails if it commits.
    """
    if not holders:
        return
    items = list(holders)
    query = (
        "INSERT INTO identity_key (tenant_id, catalog_id, class_id, identity_generation,"
        " item_id, identity_hash, state, decision_id)"
        " SELECT %(t)s, %(c)s, %(class)s, %(generation)s, k.i, k.h, %(state)s, k.d"
        " FROM unnest(%(items)b::text[], %(hashes)b::text[], %(decisions)b::uuid[])"
        " AS k(i, h, d)"
    )
    t, c, klass, generation = key.params()
    params = {
        "t": t,
        "c": c,
        "class": klass,
        "generation": generation,
        "state": state,
        "items": items,
        "hashes": [holders[i] for i in items],
        "decisions": [decision_id] * len(items),
    }
    if tx.late_errors:  # several decisions' keys may go in one statement
        tx.defer_rows(query, params, ("items", "hashes", "decisions"), rank("identity_key"))
    else:
        tx.defer_checked(query, params)


def insert_collisions(
    tx: Transaction, key: GenerationKey, candidates: Mapping[str, Sequence[str]]
) -> None:
    """Insert one unresolved collision per hash, with its candidate items."""
    if not candidates:
        return
    hashes = list(candidates)
    tx.execute(
        "INSERT INTO identity_collision (tenant_id, catalog_id, class_id,"
        " identity_generation, identity_hash)"
        " SELECT %s, %s, %s, %s, h FROM unnest(%b::text[]) AS c(h)",
        (*key.params(), hashes),
    )
    pairs = [(h, item) for h in hashes for item in candidates[h]]
    tx.execute(
        "INSERT INTO identity_candidate (tenant_id, catalog_id, class_id,"
        " identity_generation, identity_hash, item_id)"
        " SELECT %s, %s, %s, %s, h, i FROM unnest(%b::text[], %b::text[]) AS c(h, i)",
        (*key.params(), [p[0] for p in pairs], [p[1] for p in pairs]),
    )


def keys_by_item(tx: Transaction, key: GenerationKey) -> dict[str, str]:
    """``item_id → identity_hash`` of the generation's ready and active keys."""
    rows = tx.execute(
        "SELECT item_id, identity_hash FROM identity_key"
        f" WHERE {_GEN_WHERE} AND state IN ('ready', 'active')",
        key.params(),
    ).fetchall()
    return {r[0]: r[1] for r in rows}


def candidates_by_item(tx: Transaction, key: GenerationKey) -> dict[str, str]:
    """``item_id → identity_hash`` of the generation's collision candidates."""
    rows = tx.execute(
        f"SELECT item_id, identity_hash FROM identity_candidate WHERE {_GEN_WHERE}",
        key.params(),
    ).fetchall()
    return {r[0]: r[1] for r in rows}


def key_count(tx: Transaction, key: GenerationKey) -> int:
    row = tx.execute(
        f"SELECT count(*) FROM identity_key WHERE {_GEN_WHERE} AND state IN ('ready', 'active')",
        key.params(),
    ).fetchone()
    assert row is not None
    return int(row[0])


# --- collisions ----------------------------------------------------------------------


def collisions(
    tx: Transaction, key: GenerationKey, identity_hash: str | None = None
) -> list[CollisionRow]:
    """The generation's collisions (one if ``identity_hash`` is given), by hash."""
    rows = tx.execute(
        "SELECT c.identity_hash, ARRAY(SELECT x.item_id FROM identity_candidate x"
        "  WHERE x.tenant_id = c.tenant_id AND x.catalog_id = c.catalog_id"
        "  AND x.class_id = c.class_id AND x.identity_generation = c.identity_generation"
        "  AND x.identity_hash = c.identity_hash ORDER BY x.item_id),"
        " c.holder_item_id, c.decision_id, c.resolved_at FROM identity_collision c"
        " WHERE c.tenant_id = %s AND c.catalog_id = %s AND c.class_id = %s"
        " AND c.identity_generation = %s AND (%s::text IS NULL OR c.identity_hash = %s)"
        " ORDER BY c.identity_hash",
        (*key.params(), identity_hash, identity_hash),
    ).fetchall()
    return [CollisionRow(r[0], tuple(r[1]), r[2], r[3], r[4]) for r in rows]


def unresolved_collision_count(tx: Transaction, key: GenerationKey) -> int:
    row = tx.execute(
        f"SELECT count(*) FROM identity_collision WHERE {_GEN_WHERE} AND resolved_at IS NULL",
        key.params(),
    ).fetchone()
    assert row is not None
    return int(row[0])


def resolve_collision(
    tx: Transaction,
    key: GenerationKey,
    identity_hash: str,
    holder_item_id: str | None,
    decision_id: uuid.UUID,
) -> bool:
    """Record the resolution if the collision is still unresolved; False otherwise."""
    row = tx.execute(
        "UPDATE identity_collision SET holder_item_id = %s, decision_id = %s,"
        f" resolved_at = now() WHERE {_GEN_WHERE} AND identity_hash = %s"
        " AND resolved_at IS NULL RETURNING 1",
        (holder_item_id, decision_id, *key.params(), identity_hash),
    ).fetchone()
    return row is not None


# --- lookups and assignments ---------------------------------------------------------


def find_key(tx: Transaction, key: GenerationKey, identity_hash: str) -> KeyMatch | None:
    """The servable key of ``identity_hash``, joined on all five columns.

    Servable: an active key of an active generation, or a retired key of a retired
    generation (a replay pinned to it). Never a collision candidate (another table),
    a ready key, or a released one.
    """
    row = tx.execute(
        "SELECT k.item_id, k.state, g.status, i.status FROM identity_key k"
        " JOIN identity_generation g USING (tenant_id, catalog_id, class_id,"
        " identity_generation)"
        " JOIN catalog_item i USING (tenant_id, catalog_id, item_id)"
        " WHERE k.tenant_id = %s AND k.catalog_id = %s AND k.class_id = %s"
        " AND k.identity_generation = %s AND k.identity_hash = %s"
        " AND ((g.status = 'active' AND k.state = 'active')"
        " OR (g.status = 'retired' AND k.state = 'retired'))",
        (*key.params(), identity_hash),
    ).fetchall()
    # The unique index allows one active key per hash; a retired generation's keys
    # were unique when it was active.
    assert len(row) <= 1, row
    return KeyMatch(*row[0]) if row else None


def item_key(tx: Transaction, key: GenerationKey, item_id: str) -> tuple[str, str] | None:
    """``(identity_hash, state)`` of the item's key in the generation, if any."""
    row = tx.execute(
        f"SELECT identity_hash, state FROM identity_key WHERE {_GEN_WHERE} AND item_id = %s",
        (*key.params(), item_id),
    ).fetchone()
    return (row[0], row[1]) if row else None


def release_keys(tx: Transaction, tenant_id: str, catalog_id: str, item_id: str) -> int:
    """Give up the item's keys; returns how many. An active key was served, so it
    stays as history, marked ``released``; a ready key (of a generation never
    activated) was never served and is removed, so that generation's backfill still
    matches the active items of its class."""
    return release_keys_of(tx, tenant_id, catalog_id, [item_id])


def release_keys_of(
    tx: Transaction, tenant_id: str, catalog_id: str, item_ids: Sequence[str]
) -> int:
    """``release_keys`` for several items in one statement; returns how many keys."""
    if not item_ids:
        return 0
    row = tx.execute(
        "WITH dropped AS (DELETE FROM identity_key"
        " WHERE tenant_id = %(t)s AND catalog_id = %(c)s AND item_id = ANY(%(ids)s)"
        " AND state = 'ready' RETURNING 1),"
        " released AS (UPDATE identity_key SET state = 'released', updated_at = now()"
        " WHERE tenant_id = %(t)s AND catalog_id = %(c)s AND item_id = ANY(%(ids)s)"
        " AND state = 'active' RETURNING 1)"
        " SELECT (SELECT count(*) FROM dropped) + (SELECT count(*) FROM released)",
        {"t": tenant_id, "c": catalog_id, "ids": list(item_ids)},
    ).fetchone()
    assert row is not None
    return int(row[0])


def decision_actor_kind(
    tx: Transaction, tenant_id: str, catalog_id: str, decision_id: uuid.UUID
) -> str | None:
    """The actor kind ('human' or 'rule') of a decision recorded in this transaction."""
    row = tx.execute(
        "SELECT actor_kind FROM decision"
        " WHERE tenant_id = %s AND catalog_id = %s AND decision_id = %s",
        (tenant_id, catalog_id, decision_id),
    ).fetchone()
    return str(row[0]) if row else None
