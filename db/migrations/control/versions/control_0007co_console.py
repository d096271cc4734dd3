"""console: the operations console's sessions and its audit

``console_session`` holds each login (by the SHA-256 of its session id, never the
id), ``console_audit`` every action taken through the console. Two new tables; no
existing row changes.

Revision ID: control_0007co
Revises: control_0006sw
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "control_0007co"
down_revision: str | Sequence[str] | None = "control_0006sw"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: two new tables and their indexes."""
    op.create_table(
        "console_session",
        sa.Column("session_hash", sa.Text(), nullable=False),
        sa.Column("person", sa.Text(), nullable=False),
        sa.Column("token_hash", sa.Text(), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("session_hash"),
    )
    op.create_index("console_session_expires_idx", "console_session", ["expires_at"])
    op.create_table(
        "console_audit",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("person", sa.Text(), nullable=False),
        sa.Column("token_id", sa.Text(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("code", sa.Text(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.CheckConstraint(
            "outcome IN ('done', 'refused', 'failed')", name="console_audit_outcome_known"
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("console_audit_tenant_idx", "console_audit", ["tenant_id", "id"])


def downgrade() -> None:
    """Downgrade schema: drop them."""
    op.drop_index("console_audit_tenant_idx", table_name="console_audit")
    op.drop_table("console_audit")
    op.drop_index("console_session_expires_idx", table_name="console_session")
    op.drop_table("console_session")
