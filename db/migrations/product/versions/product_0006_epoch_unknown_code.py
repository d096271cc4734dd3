"""the quarantine code of an event in an unknown epoch is EPOCH_UNKNOWN

Events whose history epoch the control database did not (yet) know were quarantined
under ``EPOCH_NOT_CURRENT``, the code the resolver's retention API also answers for a
lease or read in a superseded epoch. One code now means one thing: quarantined rows
take ``EPOCH_UNKNOWN``. Also merges the two heads of 0005.

Revision ID: product_0006
Revises: product_0005at, product_0005sp
Create Date: 2026-12-01 11:00:00.000000

"""

from collections.abc import Sequence

from alembic import op

# revision identifiers, used by Alembic.
revision: str = "product_0006"
down_revision: str | Sequence[str] | None = ("product_0005at", "product_0005sp")
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.execute(
        "UPDATE quarantine SET error_code = 'EPOCH_UNKNOWN' WHERE error_code = 'EPOCH_NOT_CURRENT'"
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.execute(
        "UPDATE quarantine SET error_code = 'EPOCH_NOT_CURRENT' WHERE error_code = 'EPOCH_UNKNOWN'"
    )
