"""rebuild catch-up, cutover and cleanup bookkeeping

``rebuild`` gains what the last phases record: the shadow's caught-up position, the
generation the cutover retired, the live applier's pause at cutover, the seconds spent
in each phase (``timings``, with ``phase_started_at`` for the phase in progress) and
``cleaned_at``, set once a finished rebuild's shadow rows and lease are gone. No
existing row changes meaning: a rebuild recorded before this revision has empty
timings and is cleaned on the next pass.

Revision ID: product_0011co
Revises: product_0010sd
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "product_0011co"
down_revision: str | Sequence[str] | None = "product_0010sd"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: five nullable columns and the timings map."""
    op.add_column("rebuild", sa.Column("caught_up_position", sa.BigInteger(), nullable=True))
    op.add_column("rebuild", sa.Column("previous_generation", sa.Integer(), nullable=True))
    op.add_column("rebuild", sa.Column("cutover_pause_ms", sa.Float(), nullable=True))
    op.add_column(
        "rebuild",
        sa.Column(
            "timings",
            postgresql.JSONB(),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
    )
    op.add_column(
        "rebuild", sa.Column("phase_started_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("rebuild", sa.Column("cleaned_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    """Downgrade schema: drop them."""
    for column in (
        "cleaned_at",
        "phase_started_at",
        "timings",
        "cutover_pause_ms",
        "previous_generation",
        "caught_up_position",
    ):
        op.drop_column("rebuild", column)
