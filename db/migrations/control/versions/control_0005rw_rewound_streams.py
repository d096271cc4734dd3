"""rewound_stream: streams whose resolver history went back without a fence

Revision ID: control_0005rw
Revises: control_0004fr
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "control_0005rw"
down_revision: str | Sequence[str] | None = "control_0004fr"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: one new table."""
    op.create_table(
        "rewound_stream",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("history_epoch", sa.BigInteger(), nullable=False),
        sa.Column("signal", sa.Text(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column(
            "flagged_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("cleared_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cleared_by", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "signal IN ('position_reused', 'report_beyond_committed')",
            name="rewound_stream_signal_known",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "catalog_id", "history_epoch"),
    )


def downgrade() -> None:
    """Downgrade schema: drop it."""
    op.drop_table("rewound_stream")
