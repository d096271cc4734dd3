"""snapshot exports

Adds ``snapshot_export``: one row per snapshot export a rebuild asks for, its
status, its position W and the SHA-256 of its manifest once ready. No existing row
changes.

Revision ID: resolver_0009ex
Revises: resolver_0008rt
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from db.tables.domain import APP_ROLE

revision: str = "resolver_0009ex"
down_revision: str | Sequence[str] | None = "resolver_0008rt"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: the table, its stream index; the services insert and update
    rows (retention marks them deleted, it never deletes one)."""
    op.create_table(
        "snapshot_export",
        sa.Column("export_id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("history_epoch", sa.BigInteger(), nullable=False),
        sa.Column("lease_id", sa.Uuid(), nullable=False),
        sa.Column("requested_by", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), server_default=sa.text("'writing'"), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=True),
        sa.Column("chunks", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("records", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("manifest_key", sa.Text(), nullable=True),
        sa.Column("manifest_sha256", sa.Text(), nullable=True),
        sa.Column("error_code", sa.Text(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column(
            "heartbeat_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
        ),
        sa.Column("ready_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('writing', 'ready', 'failed', 'deleted')",
            name="snapshot_export_status_known",
        ),
        sa.CheckConstraint(
            "status <> 'ready' OR (position IS NOT NULL AND manifest_sha256 IS NOT NULL"
            " AND ready_at IS NOT NULL)",
            name="snapshot_export_ready_complete",
        ),
        sa.CheckConstraint(
            "status <> 'failed' OR error_code IS NOT NULL",
            name="snapshot_export_failed_has_code",
        ),
        sa.ForeignKeyConstraint(
            ["lease_id"], ["rebuild_lease.lease_id"], name="snapshot_export_lease_fk"
        ),
        sa.PrimaryKeyConstraint("export_id"),
    )
    op.create_index(
        "snapshot_export_stream_idx",
        "snapshot_export",
        ["tenant_id", "catalog_id", "history_epoch", "created_at"],
    )
    op.execute(f"GRANT SELECT, INSERT, UPDATE ON snapshot_export TO {APP_ROLE}")


def downgrade() -> None:
    """Downgrade schema: drop the table (the objects in the bucket stay)."""
    op.execute(f"REVOKE ALL ON snapshot_export FROM {APP_ROLE}")
    op.drop_index("snapshot_export_stream_idx", table_name="snapshot_export")
    op.drop_table("snapshot_export")
