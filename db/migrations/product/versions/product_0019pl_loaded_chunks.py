"""rebuild loaded chunks: which chunks of the export a load has committed

A load copies several chunks at once (``GAPLESS_REBUILD_LOAD_CONNECTIONS``), so they
commit out of order and a count no longer says which ones are in: ``loaded_chunks``
lists the numbers committed, in the same transaction as each chunk's rows, and
``chunks_loaded`` stays its length (a check keeps them together). Existing rows
loaded their chunks one by one, in order: they get 1 up to ``chunks_loaded``.

Revision ID: product_0019pl
Revises: product_0018rp
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "product_0019pl"
down_revision: str | Sequence[str] | None = "product_0018rp"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: the column, filled for existing rows, and its check."""
    op.add_column(
        "rebuild",
        sa.Column(
            "loaded_chunks",
            postgresql.ARRAY(sa.Integer()),
            server_default=sa.text("'{}'::integer[]"),
            nullable=False,
        ),
    )
    op.execute(
        "UPDATE rebuild SET loaded_chunks = ARRAY(SELECT generate_series(1, chunks_loaded))"
        " WHERE chunks_loaded > 0"
    )
    op.create_check_constraint(
        "rebuild_loaded_chunks_counted",
        "rebuild",
        "cardinality(loaded_chunks) = chunks_loaded",
    )


def downgrade() -> None:
    """Downgrade schema: drop them."""
    op.drop_constraint("rebuild_loaded_chunks_counted", "rebuild", type_="check")
    op.drop_column("rebuild", "loaded_chunks")
