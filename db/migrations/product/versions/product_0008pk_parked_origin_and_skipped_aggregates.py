"""parked events keep their origin; skipped quarantine entries name their aggregate

A parked event that has to be set aside (its release fails to apply, or the event it
waits on was skipped) is quarantined under the topic, partition and offset it came
from, so parked rows now keep them (null for rows parked before). A skipped entry
records the aggregate revision it gave up, so an event arriving later that waits on
that revision is set aside at once instead of parking for ever; a partial index
keeps that look cheap. The inbox outcome ``quarantined`` marks an event the applier
set aside itself: not terminal, and another copy of it is a duplicate.

Revision ID: product_0008pk
Revises: product_0007
Create Date: 2026-12-08 10:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "product_0008pk"
down_revision: str | Sequence[str] | None = "product_0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


_OUTCOMES = "'applied', 'ignored_stale', 'ignored_old_epoch', 'skipped', 'parked'"


def upgrade() -> None:
    """Upgrade schema."""
    op.drop_constraint("inbox_outcome_known", "inbox", type_="check")
    op.create_check_constraint(
        "inbox_outcome_known", "inbox", f"outcome IN ({_OUTCOMES}, 'quarantined')"
    )
    op.add_column("parked_event", sa.Column("topic", sa.Text(), nullable=True))
    op.add_column("parked_event", sa.Column("partition", sa.Integer(), nullable=True))
    op.add_column("parked_event", sa.Column("offset", sa.BigInteger(), nullable=True))
    op.add_column("quarantine", sa.Column("aggregate_type", sa.Text(), nullable=True))
    op.add_column("quarantine", sa.Column("aggregate_id", sa.Text(), nullable=True))
    op.add_column("quarantine", sa.Column("revision", sa.BigInteger(), nullable=True))
    op.create_index(
        "quarantine_skipped_aggregate_idx",
        "quarantine",
        ["consumer", "tenant_id", "catalog_id", "aggregate_type", "aggregate_id"],
        postgresql_where=sa.text("status = 'skipped' AND aggregate_type IS NOT NULL"),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index("quarantine_skipped_aggregate_idx", table_name="quarantine")
    op.drop_column("quarantine", "revision")
    op.drop_column("quarantine", "aggregate_id")
    op.drop_column("quarantine", "aggregate_type")
    op.drop_column("parked_event", "offset")
    op.drop_column("parked_event", "partition")
    op.drop_column("parked_event", "topic")
    # Without the outcome, an event set aside in quarantine has no inbox row: a retry
    # of its entry applies it as new.
    op.execute("DELETE FROM inbox WHERE outcome = 'quarantined'")
    op.drop_constraint("inbox_outcome_known", "inbox", type_="check")
    op.create_check_constraint("inbox_outcome_known", "inbox", f"outcome IN ({_OUTCOMES})")
