"""item decision: the decision that made each item row's state

Schema release v3 gives the item events (``catalog_item.upserted`` and ``.retired``)
an optional ``decision_id``, as every other projected event already carries; the
projection keeps it. Rows applied from events written before v3 keep it null until a
rebuild loads them from the resolver's state, which has it for every item.

Revision ID: product_0020di
Revises: product_0019pl
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "product_0020di"
down_revision: str | Sequence[str] | None = "product_0019pl"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: a nullable column (no rewrite of the table)."""
    op.add_column("product_item", sa.Column("decision_id", sa.Uuid(), nullable=True))


def downgrade() -> None:
    """Downgrade schema: drop it."""
    op.drop_column("product_item", "decision_id")
