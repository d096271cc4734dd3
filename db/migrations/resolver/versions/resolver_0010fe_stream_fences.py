"""stream fences; joins the evidence-retention and snapshot-export branches

``stream_cursor`` gains ``fenced_at`` and ``fenced_for_epoch``: set once, when an
operator fences the stream's history epoch after a restore (the control database
issued a newer one). A fenced stream takes no more writes and the relay publishes
none of its rows; its rows stay as history. No existing row is fenced.

Revision ID: resolver_0010fe
Revises: resolver_0008ev, resolver_0009ex
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "resolver_0010fe"
down_revision: str | Sequence[str] | None = ("resolver_0008ev", "resolver_0009ex")
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: two nullable columns and their pairing."""
    op.add_column(
        "stream_cursor", sa.Column("fenced_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("stream_cursor", sa.Column("fenced_for_epoch", sa.BigInteger(), nullable=True))
    op.create_check_constraint(
        "stream_cursor_fence_complete",
        "stream_cursor",
        "(fenced_at IS NULL) = (fenced_for_epoch IS NULL)"
        " AND (fenced_for_epoch IS NULL OR fenced_for_epoch > history_epoch)",
    )


def downgrade() -> None:
    """Downgrade schema: drop them."""
    op.drop_constraint("stream_cursor_fence_complete", "stream_cursor", type_="check")
    op.drop_column("stream_cursor", "fenced_for_epoch")
    op.drop_column("stream_cursor", "fenced_at")
