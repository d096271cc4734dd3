"""a quarantine entry can be superseded by another copy of its event

An event quarantined when one copy failed to apply may later be applied from another
copy (the resolver's retained one, which the gap closer fetches). The entry then
ends ``superseded`` instead of staying ``open`` for ever; a partial index on the open
entries' event ids keeps the applier's per-batch look cheap.

Revision ID: product_0007
Revises: product_0006
Create Date: 2026-12-01 12:30:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "product_0007"
down_revision: str | Sequence[str] | None = "product_0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.drop_constraint("quarantine_status_known", "quarantine", type_="check")
    op.create_check_constraint(
        "quarantine_status_known",
        "quarantine",
        "status IN ('open', 'retried', 'skipped', 'superseded')",
    )
    op.create_index(
        "quarantine_open_event_idx",
        "quarantine",
        ["consumer", "event_id"],
        postgresql_where=sa.text("status = 'open'"),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index("quarantine_open_event_idx", table_name="quarantine")
    op.execute("UPDATE quarantine SET status = 'open' WHERE status = 'superseded'")
    op.drop_constraint("quarantine_status_known", "quarantine", type_="check")
    op.create_check_constraint(
        "quarantine_status_known", "quarantine", "status IN ('open', 'retried', 'skipped')"
    )
