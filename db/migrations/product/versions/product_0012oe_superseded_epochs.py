"""superseded epochs: when the product side settled a fence

``superseded_epoch`` records, per catalog, the epoch a fence made current and when
the product side settled it (``db.resolver.fencing.settle_old_epochs``): from then on the
catalog's older epochs are history here, kept for the fenced retention period and
then pruned. No existing row changes meaning; a fence settled before this revision
has no record, so its old epochs stay under the live inbox pruning as before.

Revision ID: product_0012oe
Revises: product_0011co
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "product_0012oe"
down_revision: str | Sequence[str] | None = "product_0011co"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: the table."""
    op.create_table(
        "superseded_epoch",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column(
            "settled_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("tenant_id", "catalog_id", "epoch"),
    )


def downgrade() -> None:
    """Downgrade schema: drop it."""
    op.drop_table("superseded_epoch")
