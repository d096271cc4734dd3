"""stream_progress.loaded_count: positions a cutover settled through a rebuild's export

A cutover moves the live consumer's progress of a stream from L to H. The shadow
holds an outcome of its own for each position it applied after its export's W; the
positions in (L, W] it never took one by one: its generation was loaded from the
export, which holds their effects. ``loaded_count`` counts those, so that applied,
ignored and loaded together count every position below a consumer's progress once.
Existing rows start at 0.

Revision ID: product_0014lc
Revises: product_0013ca
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "product_0014lc"
down_revision: str | Sequence[str] | None = "product_0013ca"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: one counter column."""
    op.add_column(
        "stream_progress",
        sa.Column("loaded_count", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
    )


def downgrade() -> None:
    """Downgrade schema: drop it."""
    op.drop_column("stream_progress", "loaded_count")
