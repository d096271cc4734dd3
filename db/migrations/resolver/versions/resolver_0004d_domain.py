"""resolver domain: review cases, decisions, listing mappings, shipping policy
versions, splits, and the application role

Adds the accepted-domain tables of ``db.tables.domain`` and the role the resolver
services run as, ``gapless_resolver_app``: it may read and write what the services
need, but has no DELETE on ``catalog_item`` and the decision tables and no UPDATE on
the decision tables (INV-05, INV-08). Roles belong to the whole cluster, so the role
is created only if missing; grants belong to this database.

Revision ID: resolver_0004d
Revises: resolver_0003
Create Date: 2026-11-30 12:30:00.000000

"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision: str = "resolver_0004d"
down_revision: str | Sequence[str] | None = "resolver_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = "gapless_resolver_app"
_SCOPE = ["tenant_id", "catalog_id"]

# Written once, read by everyone: no UPDATE, no DELETE.
_IMMUTABLE = ("decision", "decision_prior")
# Accepted state that changes by revision but is never deleted.
_NO_DELETE = (
    "catalog_item",
    "review_case",
    "listing_mapping",
    "shipping_policy_version",
    "item_split",
    "item_split_successor",
    "item_split_remap",
    "stream_cursor",
    "stream_publication",
)
# The pruner deletes outbox rows; operators deregister consumers; leases are released.
_DELETABLE = ("outbox", "stream_retention", "stream_consumer", "rebuild_lease")


def _now(name: str) -> sa.Column[Any]:
    return sa.Column(
        name, sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
    )


def _decision_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [*_SCOPE, "decision_id"],
        ["decision.tenant_id", "decision.catalog_id", "decision.decision_id"],
        name=f"{table}_decision_fk",
    )


def _item_fk(table: str, column: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [*_SCOPE, column],
        ["catalog_item.tenant_id", "catalog_item.catalog_id", "catalog_item.item_id"],
        name=f"{table}_{column}_fk",
    )


def upgrade() -> None:
    """Upgrade schema: the domain tables, then the role and its grants (one transaction)."""
    op.create_table(
        "review_case",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("case_id", sa.Text(), nullable=False),
        sa.Column("subject_type", sa.Text(), nullable=False),
        sa.Column("subject_id", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        _now("opened_at"),
        _now("updated_at"),
        sa.CheckConstraint("status IN ('open', 'decided')", name="review_case_status_known"),
        sa.CheckConstraint("revision >= 1", name="review_case_revision_positive"),
        sa.PrimaryKeyConstraint(*_SCOPE, "case_id"),
    )
    op.create_table(
        "decision",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("decision_id", sa.Uuid(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("actor_kind", sa.Text(), nullable=False),
        sa.Column("rationale", sa.Text(), nullable=False),
        sa.Column("evidence", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("case_id", sa.Text(), nullable=True),
        sa.Column("case_revision", sa.Integer(), nullable=True),
        _now("decided_at"),
        sa.CheckConstraint("action <> ''", name="decision_action_nonempty"),
        sa.CheckConstraint("actor <> ''", name="decision_actor_nonempty"),
        sa.CheckConstraint("actor_kind IN ('human', 'rule')", name="decision_actor_kind_known"),
        sa.CheckConstraint(
            "jsonb_typeof(evidence) = 'array' AND jsonb_array_length(evidence) > 0"
            " AND NOT jsonb_path_exists(evidence, '$[*] ? (!(exists(@.capture_id))"
            ' || !(exists(@.locator)) || @.capture_id.type() != "string"'
            ' || @.locator.type() != "string")\')',
            name="decision_evidence_nonempty",
        ),
        sa.CheckConstraint(
            "(case_id IS NULL) = (case_revision IS NULL)", name="decision_case_revision_named"
        ),
        sa.ForeignKeyConstraint(
            [*_SCOPE, "case_id"],
            ["review_case.tenant_id", "review_case.catalog_id", "review_case.case_id"],
            name="decision_case_fk",
        ),
        sa.PrimaryKeyConstraint(*_SCOPE, "decision_id"),
    )
    op.create_index("decision_case_idx", "decision", [*_SCOPE, "case_id"], unique=False)
    op.create_table(
        "decision_prior",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("decision_id", sa.Uuid(), nullable=False),
        sa.Column("prior_decision_id", sa.Uuid(), nullable=False),
        sa.CheckConstraint("decision_id <> prior_decision_id", name="decision_prior_not_self"),
        _decision_fk("decision_prior"),
        sa.ForeignKeyConstraint(
            [*_SCOPE, "prior_decision_id"],
            ["decision.tenant_id", "decision.catalog_id", "decision.decision_id"],
            name="decision_prior_prior_fk",
        ),
        sa.PrimaryKeyConstraint(*_SCOPE, "decision_id", "prior_decision_id"),
    )
    op.create_table(
        "listing_mapping",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("listing_id", sa.Text(), nullable=False),
        sa.Column("item_id", sa.Text(), nullable=False),
        sa.Column("item_revision", sa.Integer(), nullable=False),
        sa.Column("decision_id", sa.Uuid(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        _now("updated_at"),
        sa.CheckConstraint("revision >= 1", name="listing_mapping_revision_positive"),
        sa.CheckConstraint("item_revision >= 1", name="listing_mapping_item_revision_positive"),
        _item_fk("listing_mapping", "item_id"),
        _decision_fk("listing_mapping"),
        sa.PrimaryKeyConstraint(*_SCOPE, "listing_id"),
    )
    op.create_index(
        "listing_mapping_item_idx", "listing_mapping", [*_SCOPE, "item_id"], unique=False
    )
    op.create_table(
        "shipping_policy_version",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("policy_id", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("effective_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("effective_to", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "terms",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("decision_id", sa.Uuid(), nullable=False),
        _now("created_at"),
        sa.CheckConstraint("version >= 1", name="shipping_policy_version_positive"),
        sa.CheckConstraint(
            "effective_to IS NULL OR effective_to > effective_from",
            name="shipping_policy_window_ordered",
        ),
        _decision_fk("shipping_policy_version"),
        sa.PrimaryKeyConstraint(*_SCOPE, "policy_id", "version"),
    )
    # INV-03; the btree_gist extension (resolver_0001) gives gist the = operators.
    op.execute(
        "ALTER TABLE shipping_policy_version ADD CONSTRAINT shipping_policy_window_no_overlap"
        " EXCLUDE USING gist (tenant_id WITH =, policy_id WITH =, scope WITH =,"
        " tstzrange(effective_from, effective_to) WITH &&)"
    )
    op.create_table(
        "item_split",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("split_id", sa.Uuid(), nullable=False),
        sa.Column("source_item_id", sa.Text(), nullable=False),
        sa.Column("source_revision", sa.Integer(), nullable=False),
        sa.Column("decision_id", sa.Uuid(), nullable=False),
        _now("created_at"),
        _item_fk("item_split", "source_item_id"),
        _decision_fk("item_split"),
        sa.PrimaryKeyConstraint(*_SCOPE, "split_id"),
        sa.UniqueConstraint(*_SCOPE, "source_item_id", name="item_split_source_once"),
    )
    op.create_table(
        "item_split_successor",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("split_id", sa.Uuid(), nullable=False),
        sa.Column("item_id", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            [*_SCOPE, "split_id"],
            ["item_split.tenant_id", "item_split.catalog_id", "item_split.split_id"],
            name="item_split_successor_split_fk",
        ),
        _item_fk("item_split_successor", "item_id"),
        sa.PrimaryKeyConstraint(*_SCOPE, "split_id", "item_id"),
    )
    op.create_table(
        "item_split_remap",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("split_id", sa.Uuid(), nullable=False),
        sa.Column("listing_id", sa.Text(), nullable=False),
        sa.Column("to_item_id", sa.Text(), nullable=False),
        sa.Column("mapping_revision", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            [*_SCOPE, "split_id", "to_item_id"],
            [
                "item_split_successor.tenant_id",
                "item_split_successor.catalog_id",
                "item_split_successor.split_id",
                "item_split_successor.item_id",
            ],
            name="item_split_remap_successor_fk",
        ),
        sa.ForeignKeyConstraint(
            [*_SCOPE, "listing_id"],
            [
                "listing_mapping.tenant_id",
                "listing_mapping.catalog_id",
                "listing_mapping.listing_id",
            ],
            name="item_split_remap_listing_fk",
        ),
        sa.PrimaryKeyConstraint(*_SCOPE, "split_id", "listing_id"),
    )
    _create_app_role()


def _create_app_role() -> None:
    # Two databases of one cluster may migrate at once: the loser of the race to
    # create the role sees duplicate_object and goes on.
    op.execute(
        "DO $$ BEGIN"
        f" IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN"
        f" CREATE ROLE {APP_ROLE} NOLOGIN;"
        " END IF;"
        " EXCEPTION WHEN duplicate_object THEN NULL;"
        " END $$"
    )
    op.execute(f"GRANT SELECT, INSERT ON {', '.join(_IMMUTABLE)} TO {APP_ROLE}")
    op.execute(f"GRANT SELECT, INSERT, UPDATE ON {', '.join(_NO_DELETE)} TO {APP_ROLE}")
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {', '.join(_DELETABLE)} TO {APP_ROLE}")


def downgrade() -> None:
    """Downgrade schema: revoke this database's grants (the role stays: it is
    cluster-wide and other databases may use it), then drop the domain tables."""
    tables = ", ".join((*_IMMUTABLE, *_NO_DELETE, *_DELETABLE))
    op.execute(f"REVOKE ALL ON {tables} FROM {APP_ROLE}")
    op.drop_table("item_split_remap")
    op.drop_table("item_split_successor")
    op.drop_table("item_split")
    op.drop_table("shipping_policy_version")
    op.drop_index("listing_mapping_item_idx", table_name="listing_mapping")
    op.drop_table("listing_mapping")
    op.drop_table("decision_prior")
    op.drop_index("decision_case_idx", table_name="decision")
    op.drop_table("decision")
    op.drop_table("review_case")
