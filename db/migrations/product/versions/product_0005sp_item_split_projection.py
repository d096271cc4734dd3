"""item split projection

Adds ``product_item_split``: each split the resolver recorded, with its successors
and remaps, so the product side shows which items replaced a split source. Only a new
table; events of splits applied before it (terminal ``applied`` outcomes that wrote
no row) are not replayed: a rebuild from a resolver export fills them in.

Revision ID: product_0005sp
Revises: product_0004
Create Date: 2026-12-01 10:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision: str = "product_0005sp"
down_revision: str | Sequence[str] | None = "product_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "product_item_split",
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("split_id", sa.Uuid(), nullable=False),
        sa.Column("source_item_id", sa.Text(), nullable=False),
        sa.Column("source_revision", sa.BigInteger(), nullable=False),
        sa.Column("successor_item_ids", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("remaps", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("decision_id", sa.Uuid(), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("generation", "tenant_id", "catalog_id", "split_id"),
    )
    op.create_index(
        "product_item_split_source_idx",
        "product_item_split",
        ["generation", "tenant_id", "catalog_id", "source_item_id"],
        unique=False,
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index("product_item_split_source_idx", table_name="product_item_split")
    op.drop_table("product_item_split")
