"""retention control

Adds the tables of retention control: ``stream_retention`` (per stream, the
pruned-through position; its row is the retention-control lock), ``stream_consumer``
(registered consumers and their reported progress) and ``rebuild_lease`` (rebuild
leases pinning a position). No pruning happened before this revision, so no stream
needs a row yet: each gets one, at 0, on first use.

Revision ID: resolver_0003
Revises: resolver_0002
Create Date: 2026-11-30 11:36:49.958870

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "resolver_0003"
down_revision: str | Sequence[str] | None = "resolver_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: three new tables, in one transaction (nothing else changes)."""
    op.create_table(
        "stream_retention",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("history_epoch", sa.BigInteger(), nullable=False),
        sa.Column("pruned_through", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("pruned_through >= 0", name="stream_retention_pruned_nonnegative"),
        sa.PrimaryKeyConstraint("tenant_id", "catalog_id", "history_epoch"),
    )
    op.create_table(
        "rebuild_lease",
        sa.Column("lease_id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("history_epoch", sa.BigInteger(), nullable=False),
        sa.Column("holder", sa.Text(), nullable=False),
        sa.Column("pinned_position", sa.BigInteger(), nullable=False),
        sa.Column("ttl_seconds", sa.Integer(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("pinned_position >= 0", name="rebuild_lease_pin_nonnegative"),
        sa.CheckConstraint("ttl_seconds > 0", name="rebuild_lease_ttl_positive"),
        sa.ForeignKeyConstraint(
            ["tenant_id", "catalog_id", "history_epoch"],
            [
                "stream_retention.tenant_id",
                "stream_retention.catalog_id",
                "stream_retention.history_epoch",
            ],
            name="rebuild_lease_retention_fk",
        ),
        sa.PrimaryKeyConstraint("lease_id"),
    )
    op.create_index(
        "rebuild_lease_unreleased_idx",
        "rebuild_lease",
        ["tenant_id", "catalog_id", "history_epoch"],
        unique=False,
        postgresql_where=sa.text("released_at IS NULL"),
    )
    op.create_table(
        "stream_consumer",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("history_epoch", sa.BigInteger(), nullable=False),
        sa.Column("consumer_id", sa.Text(), nullable=False),
        sa.Column("reported_position", sa.BigInteger(), nullable=True),
        sa.Column(
            "registered_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("reported_position >= 0", name="stream_consumer_position_nonnegative"),
        sa.ForeignKeyConstraint(
            ["tenant_id", "catalog_id", "history_epoch"],
            [
                "stream_retention.tenant_id",
                "stream_retention.catalog_id",
                "stream_retention.history_epoch",
            ],
            name="stream_consumer_retention_fk",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "catalog_id", "history_epoch", "consumer_id"),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("stream_consumer")
    op.drop_index(
        "rebuild_lease_unreleased_idx",
        table_name="rebuild_lease",
        postgresql_where=sa.text("released_at IS NULL"),
    )
    op.drop_table("rebuild_lease")
    op.drop_table("stream_retention")
