"""rebuild progress: what an export holds and what each kind of its rows cost to load

``rows_total``: the records of the rebuild's export, known once its manifest is read
(null before, and for a rebuild that never got that far). ``rows_by_kind``: the
manifest's count of each kind of record (``{"catalog_item": 1000000, ...}``).
``load_cost``: for each kind, the rows loaded so far and the seconds their chunks took
(``{"catalog_item": {"rows": 250000, "seconds": 11.2}, ...}``), from which
``processors.rebuild.progress`` weighs what is left. Existing rows get null and
empty objects: their progress shows rows loaded only.

Revision ID: product_0018rp
Revises: product_0017sw
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "product_0018rp"
down_revision: str | Sequence[str] | None = "product_0017sw"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: three columns of the rebuild row."""
    op.add_column("rebuild", sa.Column("rows_total", sa.BigInteger(), nullable=True))
    for name in ("rows_by_kind", "load_cost"):
        op.add_column(
            "rebuild",
            sa.Column(
                name,
                postgresql.JSONB(),
                server_default=sa.text("'{}'::jsonb"),
                nullable=False,
            ),
        )


def downgrade() -> None:
    """Downgrade schema: drop them."""
    for name in ("load_cost", "rows_by_kind", "rows_total"):
        op.drop_column("rebuild", name)
