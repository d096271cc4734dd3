"""the answers given to rebuild requests that were not started

``control_answer`` keeps, per request id, the answer to a REBUILD that was not
started, so a late redelivery is answered the same and starts nothing.

Revision ID: product_0013ca
Revises: product_0012oe
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "product_0013ca"
down_revision: str | Sequence[str] | None = "product_0012oe"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: one new table."""
    op.create_table(
        "control_answer",
        sa.Column("command_id", sa.Uuid(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("running_rebuild_id", sa.Uuid(), nullable=True),
        sa.Column(
            "answered_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint(
            "status IN ('already_rebuilding', 'refused')", name="control_answer_status"
        ),
        sa.PrimaryKeyConstraint("command_id"),
    )


def downgrade() -> None:
    """Downgrade schema: drop it."""
    op.drop_table("control_answer")
