"""Join the domain, identity, attribute and capture-worker branches; pin each
capture's identity generation per class.

Revision ID: resolver_0006
Revises: resolver_0005at, resolver_0005dx, resolver_0005id, resolver_0005w
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from db.tables.domain import APP_ROLE

revision: str = "resolver_0006"
down_revision: str | Sequence[str] | None = (
    "resolver_0005at",
    "resolver_0005dx",
    "resolver_0005id",
    "resolver_0005w",
)
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: the pin table; the worker inserts and reads pins, never
    changes one."""
    op.create_table(
        "capture_identity_pin",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("capture_id", sa.Uuid(), nullable=False),
        sa.Column("class_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("identity_generation", sa.Integer(), nullable=True),
        sa.Column(
            "pinned_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint(
            "identity_generation IS NULL OR identity_generation >= 1",
            name="capture_identity_pin_generation_positive",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "capture_id"],
            ["capture.tenant_id", "capture.capture_id"],
            name="capture_identity_pin_capture_fk",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "capture_id", "class_id"),
    )
    op.execute(f"GRANT SELECT, INSERT ON capture_identity_pin TO {APP_ROLE}")


def downgrade() -> None:
    """Downgrade schema: drop the pins (the branches stay as they were)."""
    op.execute(f"REVOKE ALL ON capture_identity_pin FROM {APP_ROLE}")
    op.drop_table("capture_identity_pin")
