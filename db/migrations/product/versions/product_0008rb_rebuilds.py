"""shadow rebuilds

Adds ``rebuild``: one row per rebuild request, its phase and what each phase
produced, with at most one unfinished rebuild per consumer and catalog. No existing
row changes.

Revision ID: product_0008rb
Revises: product_0007
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "product_0008rb"
down_revision: str | Sequence[str] | None = "product_0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PHASES = (
    "requested",
    "leased",
    "exporting",
    "loading",
    "catching_up",
    "cutting_over",
    "done",
    "failed",
    "cancelled",
)


def upgrade() -> None:
    """Upgrade schema: the table and its one-active-rebuild index."""
    op.create_table(
        "rebuild",
        sa.Column("rebuild_id", sa.Uuid(), nullable=False),
        sa.Column("consumer", sa.Text(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("history_epoch", sa.BigInteger(), nullable=False),
        sa.Column("phase", sa.Text(), server_default=sa.text("'requested'"), nullable=False),
        sa.Column("attempt", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("shadow_consumer", sa.Text(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=True),
        sa.Column("lease_id", sa.Uuid(), nullable=True),
        sa.Column("export_id", sa.Uuid(), nullable=True),
        sa.Column("export_position", sa.BigInteger(), nullable=True),
        sa.Column("target_position", sa.BigInteger(), nullable=True),
        sa.Column("chunks_total", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("chunks_loaded", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("rows_loaded", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("requested_by", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("error_code", sa.Text(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("claimed_by", sa.Text(), nullable=True),
        sa.Column("claim_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "phase IN (" + ", ".join(f"'{p}'" for p in _PHASES) + ")", name="rebuild_phase_known"
        ),
        sa.CheckConstraint("attempt >= 1", name="rebuild_attempt_positive"),
        sa.CheckConstraint(
            "phase <> 'failed' OR error_code IS NOT NULL", name="rebuild_failed_has_code"
        ),
        sa.CheckConstraint("chunks_loaded <= chunks_total", name="rebuild_chunks_within_total"),
        sa.PrimaryKeyConstraint("rebuild_id"),
    )
    op.create_index(
        "rebuild_one_active_idx",
        "rebuild",
        ["consumer", "tenant_id", "catalog_id"],
        unique=True,
        postgresql_where=sa.text("phase NOT IN ('done', 'failed', 'cancelled')"),
    )


def downgrade() -> None:
    """Downgrade schema: drop the table (rebuild history is lost)."""
    op.drop_index("rebuild_one_active_idx", table_name="rebuild")
    op.drop_table("rebuild")
