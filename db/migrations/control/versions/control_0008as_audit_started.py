"""audit started: a console action is recorded before it acts

``console_audit`` rows may now be ``started``: the console writes one before the
module acts and completes it with the outcome once after (``ended_at``), so a console
that dies in between leaves the action recorded as ``started``, never missing.
Existing rows keep their outcome; their ``ended_at`` stays NULL.

Revision ID: control_0008as
Revises: control_0007co
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "control_0008as"
down_revision: str | Sequence[str] | None = "control_0007co"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: ``ended_at``, and ``started`` among the outcomes."""
    op.add_column("console_audit", sa.Column("ended_at", sa.DateTime(timezone=True)))
    op.drop_constraint("console_audit_outcome_known", "console_audit", type_="check")
    op.create_check_constraint(
        "console_audit_outcome_known",
        "console_audit",
        "outcome IN ('started', 'done', 'refused', 'failed')",
    )


def downgrade() -> None:
    """Downgrade schema: started records become failed (their outcome is unknown)."""
    op.execute(
        "UPDATE console_audit SET outcome = 'failed', code = 'OUTCOME_UNKNOWN'"
        " WHERE outcome = 'started'"
    )
    op.drop_constraint("console_audit_outcome_known", "console_audit", type_="check")
    op.create_check_constraint(
        "console_audit_outcome_known", "console_audit", "outcome IN ('done', 'refused', 'failed')"
    )
    op.drop_column("console_audit", "ended_at")
