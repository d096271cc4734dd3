"""sweeps: resolved quarantine entries by when they were resolved

``quarantine_resolved_idx``: the agents' sweep deletes entries resolved (retried,
superseded, or skipped without an aggregate to remember) more than
``GAPLESS_QUARANTINE_RETENTION_SECONDS`` ago, a batch at a time, oldest first; open
entries, which the applier looks up all the time, stay out of the index. No
existing row changes.

Revision ID: product_0017sw
Revises: product_0016dd
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "product_0017sw"
down_revision: str | Sequence[str] | None = "product_0016dd"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: one partial index."""
    op.create_index(
        "quarantine_resolved_idx",
        "quarantine",
        ["resolved_at"],
        postgresql_where=sa.text("status <> 'open'"),
    )


def downgrade() -> None:
    """Downgrade schema: drop it."""
    op.drop_index("quarantine_resolved_idx", table_name="quarantine")
