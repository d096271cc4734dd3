"""decision effects; every catalog item names its decision; intake grants

1. ``decision_effect``: every aggregate revision a decision produced an event for,
   and every other revision those events depend on, written by ``record_decision`` in
   the decision's own transaction. Rows for decisions recorded before this revision
   are rebuilt from what the fact tables still say (the current revision of each
   listing mapping and policy version, and each split with its successors and
   remaps); revisions the facts no longer hold cannot be recovered and stay without
   a row. The application role may read and insert effects, never change or delete
   them.
2. ``catalog_item.decision_id`` (NOT NULL, foreign key to ``decision``, INV-05).
   Existing items are attributed honestly: a split's source and successors, at the
   revision the split wrote, to the split's decision; every other item to one
   auditable import decision per tenant and catalog (actor
   ``migration:resolver_0005dx``, actor kind 'rule', evidence naming this migration
   and the table), since no decision was recorded when they were written. The import
   decisions produced no events and get no effect rows; an item's history finds them
   through the item's ``decision_id``.
3. The application role's grants on the capture-intake tables (resolver_0004i, so
   this revision depends on it), now that the services run as that role: collectors,
   captures and receipts are inserted and read, never deleted; credentials are
   revoked and jobs move on by UPDATE.

Everything runs in the migration's one transaction.

Revision ID: resolver_0005dx
Revises: resolver_0004d
Create Date: 2026-12-01 09:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "resolver_0005dx"
down_revision: str | Sequence[str] | None = "resolver_0004d"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = "resolver_0004i"

APP_ROLE = "gapless_resolver_app"
_SCOPE = ["tenant_id", "catalog_id"]
# What the services do to the intake tables; nothing deletes from them.
_INTAKE_GRANTS = {
    "collector_instance": "SELECT, INSERT",
    "collector_credential": "SELECT, INSERT, UPDATE",
    "capture": "SELECT, INSERT",
    "receipt": "SELECT, INSERT",
    "intake_job": "SELECT, INSERT, UPDATE",
}
IMPORT_ACTOR = "migration:resolver_0005dx"
IMPORT_EVIDENCE = '[{"capture_id": "migration:resolver_0005dx", "locator": "catalog_item"}]'
IMPORT_RATIONALE = (
    "The item was written before every item revision had to name its decision;"
    " no review or rule decision was recorded for it, so this import decision"
    " accepts the revision it had when migration resolver_0005dx ran."
)

# (aggregate type, aggregate id, revision, decision) of every revision a recorded
# decision produced that the fact tables still hold.
_CHANGED = """
SELECT tenant_id, catalog_id, 'decision', decision_id::text, 1, decision_id FROM decision
UNION ALL
SELECT tenant_id, catalog_id, 'listing_mapping', listing_id, revision, decision_id
  FROM listing_mapping
UNION ALL
SELECT tenant_id, catalog_id, 'shipping_policy', policy_id, version, decision_id
  FROM shipping_policy_version
UNION ALL
SELECT tenant_id, catalog_id, 'item_split', split_id::text, 1, decision_id FROM item_split
UNION ALL
SELECT tenant_id, catalog_id, 'catalog_item', source_item_id, source_revision, decision_id
  FROM item_split
UNION ALL
SELECT s.tenant_id, s.catalog_id, 'catalog_item', x.item_id, 1, s.decision_id
  FROM item_split s JOIN item_split_successor x USING (tenant_id, catalog_id, split_id)
UNION ALL
SELECT s.tenant_id, s.catalog_id, 'listing_mapping', r.listing_id, r.mapping_revision,
  s.decision_id
  FROM item_split s JOIN item_split_remap r USING (tenant_id, catalog_id, split_id)
"""

# The item revision each held mapping revision rests on (its event's dependency).
_RELIED_ON = """
SELECT m.tenant_id, m.catalog_id, 'catalog_item', m.item_id, m.item_revision, m.decision_id
  FROM listing_mapping m
UNION ALL
SELECT s.tenant_id, s.catalog_id, 'catalog_item', r.to_item_id, 1, s.decision_id
  FROM item_split s JOIN item_split_remap r USING (tenant_id, catalog_id, split_id)
"""


def upgrade() -> None:
    """Upgrade schema: effects (table, earlier decisions' rows, grant), then the
    items' decision column, filled before it becomes NOT NULL."""
    op.create_table(
        "decision_effect",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("aggregate_type", sa.Text(), nullable=False),
        sa.Column("aggregate_id", sa.Text(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("decision_id", sa.Uuid(), nullable=False),
        sa.CheckConstraint("role IN ('changed', 'relied_on')", name="decision_effect_role_known"),
        sa.CheckConstraint("revision >= 1", name="decision_effect_revision_positive"),
        sa.ForeignKeyConstraint(
            [*_SCOPE, "decision_id"],
            ["decision.tenant_id", "decision.catalog_id", "decision.decision_id"],
            name="decision_effect_decision_fk",
        ),
        sa.PrimaryKeyConstraint(
            *_SCOPE, "aggregate_type", "aggregate_id", "revision", "role", "decision_id"
        ),
    )
    op.create_index(
        "decision_effect_changed_once",
        "decision_effect",
        [*_SCOPE, "aggregate_type", "aggregate_id", "revision"],
        unique=True,
        postgresql_where=sa.text("role = 'changed'"),
    )
    columns = "tenant_id, catalog_id, aggregate_type, aggregate_id, revision, role, decision_id"
    # A remapped listing's current row and its remap row name the same revision: the
    # conflict keeps one. A dependency the same decision changed is not relied on.
    op.execute(
        f"INSERT INTO decision_effect ({columns})"
        f" SELECT t, c, a, i, r, 'changed', d FROM ({_CHANGED}) AS x(t, c, a, i, r, d)"
        " ON CONFLICT DO NOTHING"
    )
    op.execute(
        f"INSERT INTO decision_effect ({columns})"
        f" SELECT t, c, a, i, r, 'relied_on', d FROM ({_RELIED_ON}) AS x(t, c, a, i, r, d)"
        " WHERE NOT EXISTS (SELECT 1 FROM decision_effect e WHERE e.role = 'changed'"
        "  AND (e.tenant_id, e.catalog_id, e.aggregate_type, e.aggregate_id, e.revision,"
        "  e.decision_id) = (x.t, x.c, x.a, x.i, x.r, x.d))"
        " ON CONFLICT DO NOTHING"
    )
    op.execute(f"GRANT SELECT, INSERT ON decision_effect TO {APP_ROLE}")
    _items_name_their_decision()
    for table, privileges in _INTAKE_GRANTS.items():
        op.execute(f"GRANT {privileges} ON {table} TO {APP_ROLE}")


def _items_name_their_decision() -> None:
    op.add_column("catalog_item", sa.Column("decision_id", sa.Uuid(), nullable=True))
    # What a split wrote: its source at the split's revision, its successors at 1.
    op.execute(
        "UPDATE catalog_item i SET decision_id = s.decision_id FROM item_split s"
        " WHERE (i.tenant_id, i.catalog_id, i.item_id, i.revision)"
        " = (s.tenant_id, s.catalog_id, s.source_item_id, s.source_revision)"
    )
    op.execute(
        "UPDATE catalog_item i SET decision_id = s.decision_id"
        " FROM item_split s JOIN item_split_successor x USING (tenant_id, catalog_id, split_id)"
        " WHERE (i.tenant_id, i.catalog_id, i.item_id, i.revision)"
        " = (x.tenant_id, x.catalog_id, x.item_id, 1)"
    )
    op.execute(
        sa.text(
            "INSERT INTO decision (tenant_id, catalog_id, decision_id, action, actor,"
            " actor_kind, rationale, evidence)"
            " SELECT tenant_id, catalog_id, gen_random_uuid(), 'import', :actor, 'rule',"
            " :rationale, CAST(:evidence AS jsonb)"
            " FROM (SELECT DISTINCT tenant_id, catalog_id FROM catalog_item"
            "  WHERE decision_id IS NULL) AS unattributed"
        ).bindparams(actor=IMPORT_ACTOR, rationale=IMPORT_RATIONALE, evidence=IMPORT_EVIDENCE)
    )
    op.execute(
        sa.text(
            "UPDATE catalog_item i SET decision_id = d.decision_id FROM decision d"
            " WHERE i.decision_id IS NULL AND d.actor = :actor"
            " AND (d.tenant_id, d.catalog_id) = (i.tenant_id, i.catalog_id)"
        ).bindparams(actor=IMPORT_ACTOR)
    )
    op.alter_column("catalog_item", "decision_id", nullable=False)
    op.create_foreign_key(
        "catalog_item_decision_fk",
        "catalog_item",
        "decision",
        [*_SCOPE, "decision_id"],
        ["tenant_id", "catalog_id", "decision_id"],
    )


def downgrade() -> None:
    """Downgrade schema: drop the items' decision column and the effects. The import
    decisions stay: decisions are never deleted, and later ones may name them."""
    op.execute(f"REVOKE ALL ON {', '.join(_INTAKE_GRANTS)} FROM {APP_ROLE}")
    op.drop_constraint("catalog_item_decision_fk", "catalog_item", type_="foreignkey")
    op.drop_column("catalog_item", "decision_id")
    op.execute(f"REVOKE ALL ON decision_effect FROM {APP_ROLE}")
    op.drop_index("decision_effect_changed_once", table_name="decision_effect")
    op.drop_table("decision_effect")
