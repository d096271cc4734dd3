"""identity: identity-rule generations, identity keys, collision candidates, strong ids

Adds the tables of ``db.tables.identity`` (INV-02) and the application role's grants
on them. Keys, collisions and candidates of a generation that was never activated
are replaced when its backfill runs again, so the role may delete them; a trigger
refuses to delete a key that was ever served (any state but ``ready``). Generations
are never deleted, strong identifiers never changed or deleted. Only new tables:
nothing existing changes.

Revision ID: resolver_0005id
Revises: resolver_0004d
Create Date: 2026-12-01 09:00:00.000000

"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision: str = "resolver_0005id"
down_revision: str | Sequence[str] | None = "resolver_0004d"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = "gapless_resolver_app"
_SCOPE = ["tenant_id", "catalog_id"]
_GENERATION = [*_SCOPE, "class_id", "identity_generation"]
_HASH_SHAPE = "identity_hash ~ '^[0-9a-f]{64}$'"

_NO_DELETE = ("identity_generation",)
_INSERT_ONLY = ("identity_strong_id",)
_REPLACEABLE = ("identity_key", "identity_collision", "identity_candidate")


def _now(name: str) -> sa.Column[Any]:
    return sa.Column(
        name, sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
    )


def _generation_columns() -> list[sa.Column[Any]]:
    return [
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("class_id", sa.Text(), nullable=False),
        sa.Column("identity_generation", sa.Integer(), nullable=False),
    ]


def _generation_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        _GENERATION,
        [f"identity_generation.{c}" for c in _GENERATION],
        name=f"{table}_generation_fk",
    )


def _item_fk(table: str, column: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [*_SCOPE, column],
        ["catalog_item.tenant_id", "catalog_item.catalog_id", "catalog_item.item_id"],
        name=f"{table}_{column}_fk",
    )


def _decision_fk(table: str, column: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [*_SCOPE, column],
        ["decision.tenant_id", "decision.catalog_id", "decision.decision_id"],
        name=f"{table}_{column}_fk",
    )


def upgrade() -> None:
    """Upgrade schema: the identity tables, the key-delete guard, the grants."""
    op.create_table(
        "identity_generation",
        *_generation_columns(),
        sa.Column("rule_fields", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("item_count", sa.Integer(), nullable=True),
        _now("created_at"),
        sa.Column("backfilled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("activated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("activation_decision_id", sa.Uuid(), nullable=True),
        sa.CheckConstraint("identity_generation >= 1", name="identity_generation_positive"),
        sa.CheckConstraint("revision >= 1", name="identity_generation_revision_positive"),
        sa.CheckConstraint(
            "cardinality(rule_fields) >= 1 AND array_position(rule_fields, NULL) IS NULL"
            " AND array_position(rule_fields, '') IS NULL",
            name="identity_generation_rule_nonempty",
        ),
        sa.CheckConstraint(
            "status IN ('backfilling', 'ready', 'active', 'retired')",
            name="identity_generation_status_known",
        ),
        sa.CheckConstraint(
            "(status = 'backfilling') = (backfilled_at IS NULL)"
            " AND (backfilled_at IS NULL) = (item_count IS NULL)"
            " AND (status IN ('active', 'retired')) = (activated_at IS NOT NULL)"
            " AND (activated_at IS NULL) = (activation_decision_id IS NULL)"
            " AND (status = 'retired') = (retired_at IS NOT NULL)"
            " AND (retired_at IS NULL OR retired_at > activated_at)",
            name="identity_generation_status_timestamps",
        ),
        _decision_fk("identity_generation", "activation_decision_id"),
        sa.PrimaryKeyConstraint(*_GENERATION),
    )
    # The btree_gist extension (resolver_0001) gives gist the = operators.
    op.execute(
        "ALTER TABLE identity_generation ADD CONSTRAINT identity_generation_one_active_at_a_time"
        " EXCLUDE USING gist (tenant_id WITH =, catalog_id WITH =, class_id WITH =,"
        " tstzrange(activated_at, retired_at) WITH &&) WHERE (activated_at IS NOT NULL)"
    )
    op.create_table(
        "identity_key",
        *_generation_columns(),
        sa.Column("item_id", sa.Text(), nullable=False),
        sa.Column("identity_hash", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("decision_id", sa.Uuid(), nullable=True),
        _now("created_at"),
        _now("updated_at"),
        sa.CheckConstraint(_HASH_SHAPE, name="identity_key_hash_shape"),
        sa.CheckConstraint(
            "state IN ('ready', 'active', 'retired', 'released')",
            name="identity_key_state_known",
        ),
        _generation_fk("identity_key"),
        _item_fk("identity_key", "item_id"),
        _decision_fk("identity_key", "decision_id"),
        sa.PrimaryKeyConstraint(*_GENERATION, "item_id"),
    )
    op.create_index(
        "identity_key_unique_hash",
        "identity_key",
        [*_GENERATION, "identity_hash"],
        unique=True,
        postgresql_where=sa.text("state IN ('ready', 'active')"),
    )
    op.create_index(
        "identity_key_hash_idx", "identity_key", [*_GENERATION, "identity_hash"], unique=False
    )
    op.create_table(
        "identity_collision",
        *_generation_columns(),
        sa.Column("identity_hash", sa.Text(), nullable=False),
        sa.Column("holder_item_id", sa.Text(), nullable=True),
        sa.Column("decision_id", sa.Uuid(), nullable=True),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(_HASH_SHAPE, name="identity_collision_hash_shape"),
        sa.CheckConstraint(
            "(decision_id IS NULL) = (resolved_at IS NULL)"
            " AND (holder_item_id IS NULL OR decision_id IS NOT NULL)",
            name="identity_collision_resolution_complete",
        ),
        _generation_fk("identity_collision"),
        _decision_fk("identity_collision", "decision_id"),
        sa.PrimaryKeyConstraint(*_GENERATION, "identity_hash"),
    )
    op.create_table(
        "identity_candidate",
        *_generation_columns(),
        sa.Column("identity_hash", sa.Text(), nullable=False),
        sa.Column("item_id", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            [*_GENERATION, "identity_hash"],
            [f"identity_collision.{c}" for c in (*_GENERATION, "identity_hash")],
            name="identity_candidate_collision_fk",
        ),
        _item_fk("identity_candidate", "item_id"),
        sa.PrimaryKeyConstraint(*_GENERATION, "identity_hash", "item_id"),
    )
    # Created after the candidates it points at (the two tables reference each other).
    op.create_foreign_key(
        "identity_collision_holder_is_candidate_fk",
        "identity_collision",
        "identity_candidate",
        [*_GENERATION, "identity_hash", "holder_item_id"],
        [*_GENERATION, "identity_hash", "item_id"],
    )
    op.create_table(
        "identity_strong_id",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("item_id", sa.Text(), nullable=False),
        sa.Column("scheme", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        _now("created_at"),
        sa.CheckConstraint("scheme <> '' AND value <> ''", name="identity_strong_id_nonempty"),
        _item_fk("identity_strong_id", "item_id"),
        sa.PrimaryKeyConstraint(*_SCOPE, "item_id", "scheme"),
    )
    op.create_index(
        "identity_strong_id_value_idx",
        "identity_strong_id",
        [*_SCOPE, "scheme", "value"],
        unique=False,
    )
    # A key that was ever served (active, retired, released) is history a replay may
    # need: only the ready keys of a never-activated generation may be replaced.
    op.execute(
        "CREATE FUNCTION identity_key_guard_delete() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN"
        "  IF OLD.state <> 'ready' THEN"
        "   RAISE EXCEPTION 'identity key of item % in generation % is %, not ready:"
        " it cannot be deleted', OLD.item_id, OLD.identity_generation, OLD.state"
        "    USING ERRCODE = 'restrict_violation';"
        "  END IF;"
        "  RETURN OLD;"
        " END $$"
    )
    op.execute(
        "CREATE TRIGGER identity_key_guard_delete BEFORE DELETE ON identity_key"
        " FOR EACH ROW EXECUTE FUNCTION identity_key_guard_delete()"
    )
    # The role exists: resolver_0004d created it.
    op.execute(f"GRANT SELECT, INSERT ON {', '.join(_INSERT_ONLY)} TO {APP_ROLE}")
    op.execute(f"GRANT SELECT, INSERT, UPDATE ON {', '.join(_NO_DELETE)} TO {APP_ROLE}")
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {', '.join(_REPLACEABLE)} TO {APP_ROLE}")


def downgrade() -> None:
    """Downgrade schema: revoke the grants, drop the trigger and the tables."""
    op.execute(
        f"REVOKE ALL ON {', '.join((*_INSERT_ONLY, *_NO_DELETE, *_REPLACEABLE))} FROM {APP_ROLE}"
    )
    op.execute("DROP TRIGGER identity_key_guard_delete ON identity_key")
    op.execute("DROP FUNCTION identity_key_guard_delete()")
    op.drop_index("identity_strong_id_value_idx", table_name="identity_strong_id")
    op.drop_table("identity_strong_id")
    op.drop_constraint(
        "identity_collision_holder_is_candidate_fk", "identity_collision", type_="foreignkey"
    )
    op.drop_table("identity_candidate")
    op.drop_table("identity_collision")
    op.drop_index("identity_key_hash_idx", table_name="identity_key")
    op.drop_index("identity_key_unique_hash", table_name="identity_key")
    op.drop_table("identity_key")
    op.drop_table("identity_generation")
