"""standing consumers; consumers refused for needing a rebuild

Adds ``standing_consumer`` (consumers that hold every stream, also streams they have
not reported on yet) and, on ``stream_consumer``, ``needs_rebuild_since`` with
``refused_position`` (set when a consumer's first report fell below the stream's
pruned-through position). No row changes: existing consumers keep their progress,
and no consumer stands until one is declared.

Revision ID: resolver_0008rt
Revises: resolver_0007cl
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from db.tables.domain import APP_ROLE

revision: str = "resolver_0008rt"
down_revision: str | Sequence[str] | None = "resolver_0007cl"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: one table, two nullable columns and their pairing check."""
    op.create_table(
        "standing_consumer",
        sa.Column("consumer_id", sa.Text(), nullable=False),
        sa.Column(
            "declared_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("declared_by", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("consumer_id"),
    )
    op.execute(f"GRANT SELECT, INSERT, DELETE ON standing_consumer TO {APP_ROLE}")
    op.add_column("stream_consumer", sa.Column("needs_rebuild_since", sa.DateTime(timezone=True)))
    op.add_column("stream_consumer", sa.Column("refused_position", sa.BigInteger()))
    op.create_check_constraint(
        "stream_consumer_refusal_complete",
        "stream_consumer",
        "(needs_rebuild_since IS NULL) = (refused_position IS NULL)",
    )


def downgrade() -> None:
    """Downgrade schema: drop them (a refusal on record is forgotten)."""
    op.drop_constraint("stream_consumer_refusal_complete", "stream_consumer")
    op.drop_column("stream_consumer", "refused_position")
    op.drop_column("stream_consumer", "needs_rebuild_since")
    op.execute(f"REVOKE ALL ON standing_consumer FROM {APP_ROLE}")
    op.drop_table("standing_consumer")
