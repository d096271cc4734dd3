"""inbox outcome 'skipped' for quarantined events an operator skips

Revision ID: product_0003
Revises: product_0002
Create Date: 2026-11-30 11:45:00

"""

from collections.abc import Sequence

from alembic import op

revision: str = "product_0003"
down_revision: str | Sequence[str] | None = "product_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_constraint("inbox_outcome_known", "inbox", type_="check")
    op.create_check_constraint(
        "inbox_outcome_known",
        "inbox",
        "outcome IN ('applied', 'ignored_stale', 'ignored_old_epoch', 'skipped', 'parked')",
    )


def downgrade() -> None:
    op.drop_constraint("inbox_outcome_known", "inbox", type_="check")
    op.create_check_constraint(
        "inbox_outcome_known",
        "inbox",
        "outcome IN ('applied', 'ignored_stale', 'ignored_old_epoch', 'parked')",
    )
