"""report_refusal: the last progress report the resolver refused, per stream

Revision ID: product_0015rr
Revises: product_0014lc
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "product_0015rr"
down_revision: str | Sequence[str] | None = "product_0014lc"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: one new table."""
    op.create_table(
        "report_refusal",
        sa.Column("consumer", sa.Text(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("history_epoch", sa.BigInteger(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("code", sa.Text(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column(
            "refused_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("consumer", "tenant_id", "catalog_id", "history_epoch"),
    )


def downgrade() -> None:
    """Downgrade schema: drop it."""
    op.drop_table("report_refusal")
