"""Resolver tables of item identity (INV-02): identity-rule generations, the keys
items hold in them, the collision candidates a backfill finds, and strong
identifiers.

Identity is resolver-internal: nothing here is projected, so these tables have no
events of their own (activating a generation is a decision, and the decision's event
is what reaches the outbox). What PostgreSQL enforces:
- one ready or active key per (tenant, catalog, class, generation, hash), a partial
  unique index; retired and released keys do not count, and collision candidates
  live in a table of their own, so they can never satisfy or break it;
- at most one generation active at any instant per (tenant, catalog, class): the
  windows ``[activated_at, retired_at)`` never overlap (an exclusion constraint,
  btree_gist), which also answers "which generation was active at time T";
- a generation's timestamps agree with its status (CHECK);
- keys, collisions and candidates belong to an existing generation and name existing
  items (foreign keys); an activated generation names the approving decision.
"""

from __future__ import annotations

from sqlalchemy import (
    CheckConstraint,
    Column,
    DateTime,
    ForeignKeyConstraint,
    Index,
    Integer,
    PrimaryKeyConstraint,
    Table,
    Text,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, ExcludeConstraint

from db.tables.resolver import SCOPE, decision_fk, item_fk, metadata

GENERATION_STATUSES = ("backfilling", "ready", "active", "retired")
KEY_STATES = ("ready", "active", "retired", "released")

_GENERATION = (*SCOPE, "class_id", "identity_generation")
_HASH_SHAPE = "identity_hash ~ '^[0-9a-f]{64}$'"


def _generation_fk(table: str) -> ForeignKeyConstraint:
    return ForeignKeyConstraint(
        list(_GENERATION),
        [f"identity_generation.{c}" for c in _GENERATION],
        name=f"{table}_generation_fk",
    )


# One identity rule of a class, numbered per (tenant, catalog, class). Its life:
# backfilling (keys being computed) → ready (backfill complete; collisions may wait
# for resolution) → active (approved by a human decision) → retired (the next one
# was activated). ``revision`` moves with every change (backfill, each collision
# resolution, activation), so an approval names the state its approver reviewed.
identity_generation = Table(
    "identity_generation",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("class_id", Text, nullable=False),
    Column("identity_generation", Integer, nullable=False),
    Column("rule_fields", ARRAY(Text), nullable=False),
    Column("status", Text, nullable=False),
    Column("revision", Integer, nullable=False),
    Column("item_count", Integer),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("backfilled_at", DateTime(timezone=True)),
    Column("activated_at", DateTime(timezone=True)),
    Column("retired_at", DateTime(timezone=True)),
    Column("activation_decision_id", Uuid),
    PrimaryKeyConstraint(*_GENERATION),
    decision_fk("identity_generation_activation_decision_id_fk", "activation_decision_id"),
    CheckConstraint("identity_generation >= 1", name="identity_generation_positive"),
    CheckConstraint("revision >= 1", name="identity_generation_revision_positive"),
    CheckConstraint(
        "cardinality(rule_fields) >= 1 AND array_position(rule_fields, NULL) IS NULL"
        " AND array_position(rule_fields, '') IS NULL",
        name="identity_generation_rule_nonempty",
    ),
    CheckConstraint(
        "status IN ('backfilling', 'ready', 'active', 'retired')",
        name="identity_generation_status_known",
    ),
    CheckConstraint(
        "(status = 'backfilling') = (backfilled_at IS NULL)"
        " AND (backfilled_at IS NULL) = (item_count IS NULL)"
        " AND (status IN ('active', 'retired')) = (activated_at IS NOT NULL)"
        " AND (activated_at IS NULL) = (activation_decision_id IS NULL)"
        " AND (status = 'retired') = (retired_at IS NOT NULL)"
        " AND (retired_at IS NULL OR retired_at > activated_at)",
        name="identity_generation_status_timestamps",
    ),
    ExcludeConstraint(
        ("tenant_id", "="),
        ("catalog_id", "="),
        ("class_id", "="),
        (func.tstzrange(text("activated_at"), text("retired_at")), "&&"),
        name="identity_generation_one_active_at_a_time",
        using="gist",
        where=text("activated_at IS NOT NULL"),
    ),
)

# The key an item holds in one generation (at most one per item and generation).
# ready: written by a backfill or a collision resolution, not served; active: served
# by lookups; retired: its generation was retired (served only to replays pinned to
# that generation); released: the item gave it up (never served). ``decision_id`` is
# the decision that assigned or chose it, NULL for a key a backfill derived from the
# item's accepted attributes (the activation decision approves those wholesale).
identity_key = Table(
    "identity_key",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("class_id", Text, nullable=False),
    Column("identity_generation", Integer, nullable=False),
    Column("item_id", Text, nullable=False),
    Column("identity_hash", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("decision_id", Uuid),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint(*_GENERATION, "item_id"),
    _generation_fk("identity_key"),
    item_fk("identity_key_item_id_fk", "item_id"),
    decision_fk("identity_key_decision_id_fk", "decision_id"),
    CheckConstraint(_HASH_SHAPE, name="identity_key_hash_shape"),
    CheckConstraint(
        "state IN ('ready', 'active', 'retired', 'released')", name="identity_key_state_known"
    ),
)
# INV-02: the lookup key, unique among the keys that count.
Index(
    "identity_key_unique_hash",
    *(identity_key.c[c] for c in (*_GENERATION, "identity_hash")),
    unique=True,
    postgresql_where=text("state IN ('ready', 'active')"),
)
# Lookups of retired generations (replays) and of released keys use this one.
Index(
    "identity_key_hash_idx",
    *(identity_key.c[c] for c in (*_GENERATION, "identity_hash")),
)

# A hash two or more active items of the class share when a backfill ran: no key is
# written for it until a decision resolves it, naming the item that holds the key
# (``holder_item_id``) or none of them (NULL). Never read by lookups.
identity_collision = Table(
    "identity_collision",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("class_id", Text, nullable=False),
    Column("identity_generation", Integer, nullable=False),
    Column("identity_hash", Text, nullable=False),
    Column("holder_item_id", Text),
    Column("decision_id", Uuid),
    Column("resolved_at", DateTime(timezone=True)),
    PrimaryKeyConstraint(*_GENERATION, "identity_hash"),
    _generation_fk("identity_collision"),
    decision_fk("identity_collision_decision_id_fk", "decision_id"),
    ForeignKeyConstraint(
        [*_GENERATION, "identity_hash", "holder_item_id"],
        [f"identity_candidate.{c}" for c in (*_GENERATION, "identity_hash", "item_id")],
        name="identity_collision_holder_is_candidate_fk",
        use_alter=True,
    ),
    CheckConstraint(_HASH_SHAPE, name="identity_collision_hash_shape"),
    CheckConstraint(
        "(decision_id IS NULL) = (resolved_at IS NULL)"
        " AND (holder_item_id IS NULL OR decision_id IS NOT NULL)",
        name="identity_collision_resolution_complete",
    ),
)

# The items sharing a collision's hash: candidate rows, kept apart from the keys.
identity_candidate = Table(
    "identity_candidate",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("class_id", Text, nullable=False),
    Column("identity_generation", Integer, nullable=False),
    Column("identity_hash", Text, nullable=False),
    Column("item_id", Text, nullable=False),
    PrimaryKeyConstraint(*_GENERATION, "identity_hash", "item_id"),
    ForeignKeyConstraint(
        [*_GENERATION, "identity_hash"],
        [f"identity_collision.{c}" for c in (*_GENERATION, "identity_hash")],
        name="identity_candidate_collision_fk",
    ),
    item_fk("identity_candidate_item_id_fk", "item_id"),
)

# Strong identifiers of an item (a GTIN and the like), one value per scheme,
# normalized. They only narrow an identity lookup: a key match whose item carries a
# different value, or whose claimed value another item carries, is no match.
identity_strong_id = Table(
    "identity_strong_id",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("item_id", Text, nullable=False),
    Column("scheme", Text, nullable=False),
    Column("value", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint(*SCOPE, "item_id", "scheme"),
    item_fk("identity_strong_id_item_id_fk", "item_id"),
    CheckConstraint("scheme <> '' AND value <> ''", name="identity_strong_id_nonempty"),
)
# Who else carries a claimed value.
Index(
    "identity_strong_id_value_idx",
    identity_strong_id.c.tenant_id,
    identity_strong_id.c.catalog_id,
    identity_strong_id.c.scheme,
    identity_strong_id.c.value,
)
