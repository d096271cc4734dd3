"""deferred_delivery: deliveries taken in but not applied yet (paused, epoch held)

Revision ID: product_0016dd
Revises: product_0015rr
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "product_0016dd"
down_revision: str | Sequence[str] | None = "product_0015rr"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: one new table and its index."""
    op.create_table(
        "deferred_delivery",
        sa.Column("consumer", sa.Text(), nullable=False),
        sa.Column("event_id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("history_epoch", sa.BigInteger(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("value", sa.LargeBinary(), nullable=False),
        sa.Column(
            "deferred_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint(
            "reason IN ('paused', 'epoch_held')", name="deferred_delivery_reason_known"
        ),
        sa.PrimaryKeyConstraint("consumer", "event_id"),
    )
    op.create_index(
        "deferred_delivery_catalog_idx",
        "deferred_delivery",
        ["consumer", "tenant_id", "catalog_id", "history_epoch", "position"],
    )


def downgrade() -> None:
    """Downgrade schema: drop them."""
    op.drop_index("deferred_delivery_catalog_idx", table_name="deferred_delivery")
    op.drop_table("deferred_delivery")
