"""attribute definition and attribute value projections

Adds ``product_attribute_definition`` and ``product_attribute_value``
(``db.tables.product``). Only new tables; branches from product_0004 beside other
features, and ``db.migrate`` upgrades every head.

Revision ID: product_0005at
Revises: product_0004
Create Date: 2026-12-01 09:00:00.000000

"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision: str = "product_0005at"
down_revision: str | Sequence[str] | None = "product_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _scope() -> list[sa.Column[Any]]:
    return [
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
    ]


def _tail() -> list[sa.Column[Any]]:
    return [
        sa.Column("decision_id", sa.Uuid(), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
    ]


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "product_attribute_definition",
        *_scope(),
        sa.Column("attribute_key", sa.Text(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("label", sa.Text(), nullable=False),
        sa.Column("value_type", sa.Text(), nullable=False),
        sa.Column("allowed_values", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("applies_to", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        *_tail(),
        sa.PrimaryKeyConstraint(
            "generation", "tenant_id", "catalog_id", "attribute_key", "version"
        ),
    )
    op.create_table(
        "product_attribute_value",
        *_scope(),
        sa.Column("item_id", sa.Text(), nullable=False),
        sa.Column("attribute_key", sa.Text(), nullable=False),
        sa.Column("definition_version", sa.BigInteger(), nullable=False),
        sa.Column("value_type", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("item_revision", sa.BigInteger(), nullable=False),
        *_tail(),
        sa.PrimaryKeyConstraint(
            "generation", "tenant_id", "catalog_id", "item_id", "attribute_key"
        ),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("product_attribute_value")
    op.drop_table("product_attribute_definition")
