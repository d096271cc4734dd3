"""capture intake

Adds the tables of capture intake (AW-02): ``collector_instance`` (the stable
identity owning captures and receipts), ``collector_credential`` (rotating client ids
mapped to an instance), ``capture``, ``receipt`` (unique per instance and idempotency
key) and ``intake_job`` (deterministic jobs the sweeper re-enqueues while pending).
Only new tables: nothing existing changes. Branches from resolver_0003 beside other
features; ``db.migrate`` upgrades every head.

Revision ID: resolver_0004i
Revises: resolver_0003
Create Date: 2026-11-30 12:28:31.838694

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "resolver_0004i"
down_revision: str | Sequence[str] | None = "resolver_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "collector_instance",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("instance_id", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("tenant_id", "source", "instance_id"),
    )
    op.create_table(
        "capture",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("capture_id", sa.Uuid(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("instance_id", sa.Text(), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("source_url", sa.Text(), nullable=False),
        sa.Column("captured_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("content_type", sa.Text(), nullable=False),
        sa.Column("content_sha256", sa.Text(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("evidence_key", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("content_sha256 ~ '^[0-9a-f]{64}$'", name="capture_sha256_hex"),
        sa.CheckConstraint("size_bytes >= 0", name="capture_size_nonnegative"),
        sa.ForeignKeyConstraint(
            ["tenant_id", "source", "instance_id"],
            [
                "collector_instance.tenant_id",
                "collector_instance.source",
                "collector_instance.instance_id",
            ],
            name="capture_instance_fk",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "capture_id"),
    )
    op.create_table(
        "collector_credential",
        sa.Column("client_id", sa.Text(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("instance_id", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id", "source", "instance_id"],
            [
                "collector_instance.tenant_id",
                "collector_instance.source",
                "collector_instance.instance_id",
            ],
            name="collector_credential_instance_fk",
        ),
        sa.PrimaryKeyConstraint("client_id"),
    )
    op.create_index(
        "collector_credential_instance_idx",
        "collector_credential",
        ["tenant_id", "source", "instance_id"],
        unique=False,
    )
    op.create_table(
        "intake_job",
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("capture_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("enqueued_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("status IN ('pending', 'enqueued')", name="intake_job_status_known"),
        sa.CheckConstraint("attempts >= 0", name="intake_job_attempts_nonnegative"),
        sa.ForeignKeyConstraint(
            ["tenant_id", "capture_id"],
            ["capture.tenant_id", "capture.capture_id"],
            name="intake_job_capture_fk",
        ),
        sa.PrimaryKeyConstraint("job_id"),
        sa.UniqueConstraint("tenant_id", "capture_id", "kind", name="intake_job_capture_kind"),
    )
    op.create_index(
        "intake_job_pending_idx",
        "intake_job",
        ["next_attempt_at", "job_id"],
        unique=False,
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_table(
        "receipt",
        sa.Column("receipt_id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("instance_id", sa.Text(), nullable=False),
        sa.Column("idempotency_key", sa.Text(), nullable=False),
        sa.Column("request_fingerprint", sa.Text(), nullable=False),
        sa.Column("capture_id", sa.Uuid(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "capture_id"],
            ["capture.tenant_id", "capture.capture_id"],
            name="receipt_capture_fk",
        ),
        sa.PrimaryKeyConstraint("receipt_id"),
        sa.UniqueConstraint(
            "tenant_id", "source", "instance_id", "idempotency_key", name="receipt_idempotency_key"
        ),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("receipt")
    op.drop_index(
        "intake_job_pending_idx",
        table_name="intake_job",
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.drop_table("intake_job")
    op.drop_index("collector_credential_instance_idx", table_name="collector_credential")
    op.drop_table("collector_credential")
    op.drop_table("capture")
    op.drop_table("collector_instance")
