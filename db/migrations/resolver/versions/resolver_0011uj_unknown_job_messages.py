"""unknown job messages: jobs the worker was asked to run that the database lacks

``unknown_job_message`` records, once per job id, a job message (or a run under
way) whose ``intake_job`` row the resolver database does not hold, typically after a
restore from a backup taken before the capture was accepted, with the stable code
``JOB_GONE``; the services' role may insert and update it. No existing row changes.

Revision ID: resolver_0011uj
Revises: resolver_0010fe
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from db.tables.domain import APP_ROLE

revision: str = "resolver_0011uj"
down_revision: str | Sequence[str] | None = "resolver_0010fe"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: the table and its grants."""
    op.create_table(
        "unknown_job_message",
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("capture_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("found_by", sa.Text(), nullable=False),
        sa.Column("error_code", sa.Text(), nullable=False),
        sa.Column(
            "first_seen_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
        ),
        sa.Column(
            "last_seen_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
        ),
        sa.Column("times_seen", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.PrimaryKeyConstraint("job_id"),
        sa.CheckConstraint(
            "found_by IN ('message', 'run')", name="unknown_job_message_found_by_known"
        ),
        sa.CheckConstraint("times_seen >= 1", name="unknown_job_message_seen_positive"),
    )
    op.execute(f"GRANT SELECT, INSERT, UPDATE ON unknown_job_message TO {APP_ROLE}")


def downgrade() -> None:
    """Downgrade schema: drop it."""
    op.drop_table("unknown_job_message")
