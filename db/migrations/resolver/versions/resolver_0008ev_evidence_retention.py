"""evidence retention: regression fixtures, the sweep's deletion audit, missing
artifacts, and the indexes and grants the sweep needs

Creates ``evidence_fixture`` (a regression fixture pins a capture), ``evidence_deletion``
(every deletion of the evidence sweep) and ``evidence_missing`` (artifacts a kept
capture names that the bucket does not hold). Adds the indexes the sweep's reference
checks and deletes read through (captures by artifact key and by age, receipts by
capture, repairs by job, decisions by cited evidence), and grants the services' role
DELETE on a capture and the rows derived from it, the sweep's one step; decisions and
accepted facts still cannot be deleted (INV-08); and UPDATE of the capture's key
column, which lets the sweep lock a capture row. No row is rewritten.

Revision ID: resolver_0008ev
Revises: resolver_0007cl
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from db.tables.domain import APP_ROLE

revision: str = "resolver_0008ev"
down_revision: str | Sequence[str] | None = "resolver_0007cl"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A capture and what derives from it: the sweep deletes them together.
_DELETED_WITH_CAPTURE = (
    "capture_claim",
    "capture_repair",
    "capture_checkpoint",
    "capture_item",
    "capture_identity_pin",
    "receipt",
    "intake_job",
    "capture",
)


def upgrade() -> None:
    """Upgrade schema: the three evidence tables, the sweep's indexes and grants."""
    op.create_table(
        "evidence_fixture",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("capture_id", sa.Uuid(), nullable=False),
        sa.Column("fixture", sa.Text(), nullable=False),
        sa.Column("pinned_by", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint(
            "fixture <> '' AND pinned_by <> '' AND reason <> ''", name="evidence_fixture_named"
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id", "capture_id"],
            ["capture.tenant_id", "capture.capture_id"],
            name="evidence_fixture_capture_fk",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "capture_id", "fixture"),
    )
    op.create_table(
        "evidence_deletion",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("evidence_key", sa.Text(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=True),
        sa.Column("capture_id", sa.Uuid(), nullable=True),
        sa.Column(
            "derived",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("swept_by", sa.Text(), nullable=False),
        sa.Column(
            "recorded_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("kind IN ('capture', 'object')", name="evidence_deletion_kind_known"),
        sa.CheckConstraint(
            "reason IN ('expired', 'orphan')", name="evidence_deletion_reason_known"
        ),
        sa.CheckConstraint(
            "status IN ('pending', 'done', 'cancelled')", name="evidence_deletion_status_known"
        ),
        sa.CheckConstraint(
            "kind <> 'capture' OR (tenant_id IS NOT NULL AND capture_id IS NOT NULL"
            " AND status = 'done')",
            name="evidence_deletion_capture_named",
        ),
        sa.CheckConstraint(
            "(status = 'pending') = (completed_at IS NULL)", name="evidence_deletion_completed"
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "evidence_deletion_object_idx",
        "evidence_deletion",
        ["evidence_key"],
        postgresql_where=sa.text("kind = 'object'"),
    )
    op.create_index(
        "evidence_deletion_pending_idx",
        "evidence_deletion",
        ["id"],
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_table(
        "evidence_missing",
        sa.Column("evidence_key", sa.Text(), nullable=False),
        sa.Column(
            "first_seen_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
        ),
        sa.Column(
            "checked_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("evidence_key"),
    )
    op.create_index("capture_evidence_key_idx", "capture", ["evidence_key"])
    op.create_index("capture_created_idx", "capture", ["created_at", "tenant_id", "capture_id"])
    op.create_index("receipt_capture_idx", "receipt", ["tenant_id", "capture_id"])
    op.create_index("capture_repair_job_idx", "capture_repair", ["job_id"])
    op.create_index(
        "decision_evidence_idx",
        "decision",
        ["evidence"],
        postgresql_using="gin",
        postgresql_ops={"evidence": "jsonb_path_ops"},
    )
    op.execute(f"GRANT SELECT, INSERT, DELETE ON evidence_fixture TO {APP_ROLE}")
    op.execute(f"GRANT SELECT, INSERT, UPDATE ON evidence_deletion TO {APP_ROLE}")
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON evidence_missing TO {APP_ROLE}")
    op.execute(f"GRANT DELETE ON {', '.join(_DELETED_WITH_CAPTURE)} TO {APP_ROLE}")
    # SELECT … FOR UPDATE needs UPDATE on some column: the sweep locks a capture row
    # before deciding on it. The key column only, and every capture's receipt
    # references it (no ON UPDATE action), so no update of it can succeed.
    op.execute(f"GRANT UPDATE (capture_id) ON capture TO {APP_ROLE}")


def downgrade() -> None:
    """Downgrade schema: drop the evidence tables and indexes, take DELETE back."""
    op.execute(f"REVOKE UPDATE (capture_id) ON capture FROM {APP_ROLE}")
    op.execute(f"REVOKE DELETE ON {', '.join(_DELETED_WITH_CAPTURE)} FROM {APP_ROLE}")
    for index, table in (
        ("decision_evidence_idx", "decision"),
        ("capture_repair_job_idx", "capture_repair"),
        ("receipt_capture_idx", "receipt"),
        ("capture_created_idx", "capture"),
        ("capture_evidence_key_idx", "capture"),
    ):
        op.drop_index(index, table_name=table)
    op.execute(
        f"REVOKE ALL ON evidence_fixture, evidence_deletion, evidence_missing FROM {APP_ROLE}"
    )
    op.drop_table("evidence_missing")
    op.drop_table("evidence_deletion")
    op.drop_table("evidence_fixture")
