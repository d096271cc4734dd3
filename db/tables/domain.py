"""Resolver tables of the accepted domain: review cases, immutable decisions and the
facts they accept (listing mappings, shipping policy versions, splits).

They live on the resolver metadata, so the resolver migrations create them. What
PostgreSQL enforces here (DESIGN §9):
- INV-05: every fact row names its decision by a NOT NULL foreign key; a decision
  rests on at least one evidence reference (capture + locator), a CHECK constraint;
- INV-03: shipping policy windows of one (tenant, policy, scope) never overlap, an
  exclusion constraint over ``tstzrange(effective_from, effective_to)`` (btree_gist);
- INV-04 and INV-01 are enforced by the write path (``UPDATE … WHERE revision =
  expected``; ``FOR SHARE`` on the target item), INV-08 by the application role's
  grants (no DELETE on items and decisions, no UPDATE on decisions).
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
    UniqueConstraint,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, ExcludeConstraint

from db.tables.resolver import SCOPE, decision_fk, item_fk, metadata

APP_ROLE = "gapless_resolver_app"
"""The role the resolver services run as (created by migration resolver_0004d)."""

CASE_STATUSES = ("open", "decided")
ACTOR_KINDS = ("human", "rule")


# A piece of work for a reviewer about one subject (an item, a listing, …). Every
# decision made on it moves ``revision`` by one, and only if the decision was made
# against the current revision (INV-04).
review_case = Table(
    "review_case",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("case_id", Text, nullable=False),
    Column("subject_type", Text, nullable=False),
    Column("subject_id", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("revision", Integer, nullable=False),
    Column("opened_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint(*SCOPE, "case_id"),
    CheckConstraint("status IN ('open', 'decided')", name="review_case_status_known"),
    CheckConstraint("revision >= 1", name="review_case_revision_positive"),
)

# An accepted decision, by a human reviewer or an automatic rule. Rows are never
# updated or deleted (the application role has neither grant): a correction is a
# new decision naming the one it corrects in ``decision_prior``. ``evidence`` is a
# non-empty JSON array of {"capture_id": text, "locator": text}.
decision = Table(
    "decision",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("decision_id", Uuid, nullable=False),
    Column("action", Text, nullable=False),
    Column("actor", Text, nullable=False),
    Column("actor_kind", Text, nullable=False),
    Column("rationale", Text, nullable=False),
    Column("evidence", JSONB, nullable=False),
    Column("case_id", Text),
    Column("case_revision", Integer),
    Column("decided_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint(*SCOPE, "decision_id"),
    ForeignKeyConstraint(
        [*SCOPE, "case_id"],
        ["review_case.tenant_id", "review_case.catalog_id", "review_case.case_id"],
        name="decision_case_fk",
    ),
    CheckConstraint("action <> ''", name="decision_action_nonempty"),
    CheckConstraint("actor <> ''", name="decision_actor_nonempty"),
    CheckConstraint("actor_kind IN ('human', 'rule')", name="decision_actor_kind_known"),
    CheckConstraint(
        "jsonb_typeof(evidence) = 'array' AND jsonb_array_length(evidence) > 0"
        " AND NOT jsonb_path_exists(evidence, '$[*] ? (!(exists(@.capture_id))"
        ' || !(exists(@.locator)) || @.capture_id.type() != "string"'
        ' || @.locator.type() != "string")\')',
        name="decision_evidence_nonempty",
    ),
    CheckConstraint(
        "(case_id IS NULL) = (case_revision IS NULL)", name="decision_case_revision_named"
    ),
)
# A subject's decision history is read by case. Partial: a rule decision has no case,
# and an index that holds every decision under the primary key's leading columns
# can be chosen for the foreign-key checks against ``decision`` while the table's
# statistics are young (migration ``resolver_0013dc``).
Index(
    "decision_case_idx",
    decision.c.tenant_id,
    decision.c.catalog_id,
    decision.c.case_id,
    postgresql_where=text("case_id IS NOT NULL"),
)
# The evidence sweep asks whether any decision cites a capture (``evidence @> …``).
Index(
    "decision_evidence_idx",
    decision.c.evidence,
    postgresql_using="gin",
    postgresql_ops={"evidence": "jsonb_path_ops"},
)

# The earlier decisions a decision rests on or corrects; as immutable as decisions.
decision_prior = Table(
    "decision_prior",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("decision_id", Uuid, nullable=False),
    Column("prior_decision_id", Uuid, nullable=False),
    PrimaryKeyConstraint(*SCOPE, "decision_id", "prior_decision_id"),
    decision_fk("decision_prior_decision_fk"),
    ForeignKeyConstraint(
        [*SCOPE, "prior_decision_id"],
        ["decision.tenant_id", "decision.catalog_id", "decision.decision_id"],
        name="decision_prior_prior_fk",
    ),
    CheckConstraint("decision_id <> prior_decision_id", name="decision_prior_not_self"),
)

EFFECT_ROLES = ("changed", "relied_on")

# What a decision did, written in its own transaction and as immutable as it: one
# 'changed' row per aggregate revision it produced an event for (the decision itself
# included), and one 'relied_on' row per other aggregate revision one of those
# events depends on (the item a listing was mapped onto, a variant's parent). Facts
# keep only their current revision; these rows keep every one, so an item's history
# still finds the decision that mapped a listing onto it after the listing moved.
# An aggregate revision is produced by exactly one decision: the partial unique index.
decision_effect = Table(
    "decision_effect",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("aggregate_type", Text, nullable=False),
    Column("aggregate_id", Text, nullable=False),
    Column("revision", Integer, nullable=False),
    Column("role", Text, nullable=False),
    Column("decision_id", Uuid, nullable=False),
    PrimaryKeyConstraint(
        *SCOPE, "aggregate_type", "aggregate_id", "revision", "role", "decision_id"
    ),
    decision_fk("decision_effect_decision_fk"),
    CheckConstraint("role IN ('changed', 'relied_on')", name="decision_effect_role_known"),
    CheckConstraint("revision >= 1", name="decision_effect_revision_positive"),
)
Index(
    "decision_effect_changed_once",
    decision_effect.c.tenant_id,
    decision_effect.c.catalog_id,
    decision_effect.c.aggregate_type,
    decision_effect.c.aggregate_id,
    decision_effect.c.revision,
    unique=True,
    postgresql_where=text("role = 'changed'"),
)

# A listing of a source mapped onto a catalog item (INV-01): ``item_revision`` is the
# target's revision, active, when this mapping revision was accepted.
listing_mapping = Table(
    "listing_mapping",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("listing_id", Text, nullable=False),
    Column("item_id", Text, nullable=False),
    Column("item_revision", Integer, nullable=False),
    Column("decision_id", Uuid, nullable=False),
    Column("revision", Integer, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint(*SCOPE, "listing_id"),
    item_fk("listing_mapping_item_id_fk", "item_id"),
    decision_fk("listing_mapping_decision_fk"),
    CheckConstraint("revision >= 1", name="listing_mapping_revision_positive"),
    CheckConstraint("item_revision >= 1", name="listing_mapping_item_revision_positive"),
)
# A split finds the listings mapped to its source item.
Index(
    "listing_mapping_item_idx",
    listing_mapping.c.tenant_id,
    listing_mapping.c.catalog_id,
    listing_mapping.c.item_id,
)

# One version of a shipping policy in one scope, valid over [effective_from,
# effective_to) (an open end is NULL). Versions are numbered per policy within a
# catalog; windows of one (tenant, policy, scope) never overlap (INV-03).
shipping_policy_version = Table(
    "shipping_policy_version",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("policy_id", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("scope", Text, nullable=False),
    Column("effective_from", DateTime(timezone=True), nullable=False),
    Column("effective_to", DateTime(timezone=True)),
    Column("terms", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("decision_id", Uuid, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint(*SCOPE, "policy_id", "version"),
    decision_fk("shipping_policy_version_decision_fk"),
    CheckConstraint("version >= 1", name="shipping_policy_version_positive"),
    CheckConstraint(
        "effective_to IS NULL OR effective_to > effective_from",
        name="shipping_policy_window_ordered",
    ),
    ExcludeConstraint(
        ("tenant_id", "="),
        ("policy_id", "="),
        ("scope", "="),
        (func.tstzrange(text("effective_from"), text("effective_to")), "&&"),
        name="shipping_policy_window_no_overlap",
        using="gist",
    ),
)

# A split of an item into successors (INV-08): the source item stays, with status
# 'split' at ``source_revision``; earlier decisions stay as they were.
item_split = Table(
    "item_split",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("split_id", Uuid, nullable=False),
    Column("source_item_id", Text, nullable=False),
    Column("source_revision", Integer, nullable=False),
    Column("decision_id", Uuid, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint(*SCOPE, "split_id"),
    UniqueConstraint(*SCOPE, "source_item_id", name="item_split_source_once"),
    item_fk("item_split_source_item_id_fk", "source_item_id"),
    decision_fk("item_split_decision_fk"),
)

item_split_successor = Table(
    "item_split_successor",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("split_id", Uuid, nullable=False),
    Column("item_id", Text, nullable=False),
    PrimaryKeyConstraint(*SCOPE, "split_id", "item_id"),
    ForeignKeyConstraint(
        [*SCOPE, "split_id"],
        ["item_split.tenant_id", "item_split.catalog_id", "item_split.split_id"],
        name="item_split_successor_split_fk",
    ),
    item_fk("item_split_successor_item_id_fk", "item_id"),
)

# A listing moved by a split from the source item to one of its successors, at the
# listing mapping's new revision.
item_split_remap = Table(
    "item_split_remap",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("split_id", Uuid, nullable=False),
    Column("listing_id", Text, nullable=False),
    Column("to_item_id", Text, nullable=False),
    Column("mapping_revision", Integer, nullable=False),
    PrimaryKeyConstraint(*SCOPE, "split_id", "listing_id"),
    ForeignKeyConstraint(
        [*SCOPE, "split_id", "to_item_id"],
        [
            "item_split_successor.tenant_id",
            "item_split_successor.catalog_id",
            "item_split_successor.split_id",
            "item_split_successor.item_id",
        ],
        name="item_split_remap_successor_fk",
    ),
    ForeignKeyConstraint(
        [*SCOPE, "listing_id"],
        ["listing_mapping.tenant_id", "listing_mapping.catalog_id", "listing_mapping.listing_id"],
        name="item_split_remap_listing_fk",
    ),
)
