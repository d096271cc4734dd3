"""fence runs: the plan of a fence of every catalog of a restored database

``fence_run`` is one ``gapless fence-epoch --all`` (who, why, when);
``fence_run_catalog`` the catalogs it fences, each with the epoch that was current
when the run began (the one it fences), so the run asked again fences the same
epochs and never the new ones.

Revision ID: control_0004fr
Revises: control_0003pa
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "control_0004fr"
down_revision: str | Sequence[str] | None = "control_0003pa"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: two new tables."""
    op.create_table(
        "fence_run",
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("requested_by", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("run_id"),
    )
    op.create_table(
        "fence_run_catalog",
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("superseded_epoch", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["fence_run.run_id"]),
        sa.PrimaryKeyConstraint("run_id", "tenant_id", "catalog_id"),
    )


def downgrade() -> None:
    """Downgrade schema: drop them."""
    op.drop_table("fence_run_catalog")
    op.drop_table("fence_run")
