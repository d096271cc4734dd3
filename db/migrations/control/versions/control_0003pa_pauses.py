"""pauses of a catalog's processing, the processes honouring them, their acks

``stream_pause`` holds each pause (one open per catalog), ``process_instance`` the
processes that check pauses with when each was last seen, ``pause_ack`` each
process's acknowledgement of holding or releasing a pause.

Revision ID: control_0003pa
Revises: control_0002fe
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "control_0003pa"
down_revision: str | Sequence[str] | None = "control_0002fe"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: three new tables."""
    op.create_table(
        "stream_pause",
        sa.Column("pause_id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("paused_by", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column(
            "paused_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("resumed_by", sa.Text(), nullable=True),
        sa.Column("resumed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("pause_id"),
    )
    op.create_index(
        "stream_pause_one_open",
        "stream_pause",
        ["tenant_id", "catalog_id"],
        unique=True,
        postgresql_where=sa.text("resumed_at IS NULL"),
    )
    op.create_table(
        "process_instance",
        sa.Column("instance_id", sa.Text(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column(
            "started_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column(
            "seen_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("instance_id"),
    )
    op.create_table(
        "pause_ack",
        sa.Column("pause_id", sa.Uuid(), nullable=False),
        sa.Column("instance_id", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column(
            "acked_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint("state IN ('paused', 'resumed')", name="pause_ack_state"),
        sa.PrimaryKeyConstraint("pause_id", "instance_id", "state"),
    )


def downgrade() -> None:
    """Downgrade schema: drop them."""
    op.drop_table("pause_ack")
    op.drop_table("process_instance")
    op.drop_index("stream_pause_one_open", table_name="stream_pause")
    op.drop_table("stream_pause")
