"""who issued each epoch

``history_epoch_log`` gains ``issued_by`` (the operator or component that issued the
epoch) and ``superseded_epoch`` (the epoch it fenced; null for a first epoch).
Existing rows were all first epochs issued by writers: ``issued_by`` reads
``'writer'`` for them.

Revision ID: control_0002fe
Revises: control_0001
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "control_0002fe"
down_revision: str | Sequence[str] | None = "control_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: two columns, the first filled for existing rows."""
    op.add_column(
        "history_epoch_log",
        sa.Column("issued_by", sa.Text(), server_default=sa.text("'writer'"), nullable=False),
    )
    op.add_column(
        "history_epoch_log", sa.Column("superseded_epoch", sa.BigInteger(), nullable=True)
    )


def downgrade() -> None:
    """Downgrade schema: drop them."""
    op.drop_column("history_epoch_log", "superseded_epoch")
    op.drop_column("history_epoch_log", "issued_by")
