"""capture worker: source bindings, capture results and claims, source-item state,
job checkpoints, repairs, and the worker's job lease

Adds the tables of ``db.tables.capture_work`` and extends ``intake_job`` with the
worker's states (running, retrying, done, failed, skipped) and its lease columns.
Grants the application role what the worker needs. Branches from resolver_0004i;
the role is created here if the domain branch (resolver_0004d) has not run yet.

Revision ID: resolver_0005w
Revises: resolver_0004i
Create Date: 2026-11-30 13:21:12.880828

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "resolver_0005w"
down_revision: str | Sequence[str] | None = "resolver_0004i"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = "gapless_resolver_app"
_OLD_STATUSES = "status IN ('pending', 'enqueued')"
_NEW_STATUSES = (
    "status IN ('pending', 'enqueued', 'running', 'retrying', 'done', 'failed', 'skipped')"
)
# What the worker writes and updates, and what it only reads or appends to.
_WRITTEN = ("capture_item", "capture_claim", "source_item_state", "capture_checkpoint")
_APPENDED = ("source_binding", "capture_repair")


def upgrade() -> None:
    """Upgrade schema: the worker's tables, the job states and lease, then grants."""
    op.create_table(
        "source_binding",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("adapter", sa.Text(), nullable=False),
        sa.Column("registered_by", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("catalog_id <> '' AND adapter <> ''", name="source_binding_named"),
        sa.PrimaryKeyConstraint("tenant_id", "source"),
    )
    op.create_table(
        "source_item_state",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("source_item_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("captured_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("capture_created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("capture_id", sa.Uuid(), nullable=False),
        sa.Column("parser_version", sa.Integer(), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.Text(), nullable=False),
        sa.Column("item_id", sa.Text(), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("tenant_id", "source", "source_item_id"),
    )
    op.create_table(
        "capture_checkpoint",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("parser_version", sa.Integer(), nullable=False),
        sa.Column("next_item", sa.Integer(), nullable=False),
        sa.Column("items", sa.Integer(), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "next_item >= 0 AND next_item <= items", name="capture_checkpoint_in_range"
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["intake_job.job_id"], name="capture_checkpoint_job_fk"
        ),
        sa.PrimaryKeyConstraint("tenant_id", "job_id", "parser_version"),
    )
    op.create_table(
        "capture_item",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("capture_id", sa.Uuid(), nullable=False),
        sa.Column("source_item_id", sa.Text(), nullable=False),
        sa.Column("parser_version", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("adapter", sa.Text(), nullable=False),
        sa.Column("item_index", sa.Integer(), nullable=True),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.Text(), nullable=False),
        sa.Column("locator", sa.Text(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error_code", sa.Text(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("item_id", sa.Text(), nullable=True),
        sa.Column("decision_id", sa.Uuid(), nullable=True),
        sa.Column("case_id", sa.Text(), nullable=True),
        sa.Column("resolved_by", sa.Text(), nullable=True),
        sa.Column("resolution_reason", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "outcome <> 'retryable' OR next_attempt_at IS NOT NULL",
            name="capture_item_retry_scheduled",
        ),
        sa.CheckConstraint(
            "outcome <> 'skipped' OR (resolved_by IS NOT NULL AND resolution_reason <> '')",
            name="capture_item_skip_audited",
        ),
        sa.CheckConstraint(
            "outcome IN ('applied', 'unchanged', 'superseded', 'review', 'rejected',"
            " 'retryable', 'failed', 'skipped')",
            name="capture_item_outcome_known",
        ),
        sa.CheckConstraint(
            "outcome NOT IN ('rejected', 'retryable', 'failed') OR error_code IS NOT NULL",
            name="capture_item_failure_classified",
        ),
        sa.CheckConstraint("attempts >= 0", name="capture_item_attempts_nonnegative"),
        sa.ForeignKeyConstraint(["job_id"], ["intake_job.job_id"], name="capture_item_job_fk"),
        sa.ForeignKeyConstraint(
            ["tenant_id", "capture_id"],
            ["capture.tenant_id", "capture.capture_id"],
            name="capture_item_capture_fk",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "capture_id", "source_item_id", "parser_version"),
        sa.UniqueConstraint("id", name="capture_item_id_key"),
    )
    op.create_index("capture_item_job_idx", "capture_item", ["job_id", "item_index"], unique=False)
    op.create_index(
        "capture_item_open_idx",
        "capture_item",
        ["tenant_id", "id"],
        unique=False,
        postgresql_where=sa.text("outcome IN ('retryable', 'failed')"),
    )
    op.create_table(
        "capture_claim",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("capture_id", sa.Uuid(), nullable=False),
        sa.Column("source_item_id", sa.Text(), nullable=False),
        sa.Column("parser_version", sa.Integer(), nullable=False),
        sa.Column("field", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("locator", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "capture_id", "source_item_id", "parser_version"],
            [
                "capture_item.tenant_id",
                "capture_item.capture_id",
                "capture_item.source_item_id",
                "capture_item.parser_version",
            ],
            name="capture_claim_item_fk",
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "capture_id", "source_item_id", "parser_version", "field"
        ),
    )
    op.create_table(
        "capture_repair",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("capture_item_id", sa.BigInteger(), nullable=True),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("action <> 'skip' OR reason <> ''", name="capture_repair_skip_reason"),
        sa.CheckConstraint(
            "action IN ('retry', 'skip', 'replay')", name="capture_repair_action_known"
        ),
        sa.ForeignKeyConstraint(
            ["capture_item_id"], ["capture_item.id"], name="capture_repair_capture_item_fk"
        ),
        sa.ForeignKeyConstraint(["job_id"], ["intake_job.job_id"], name="capture_repair_job_fk"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.add_column("intake_job", sa.Column("lease_owner", sa.Text(), nullable=True))
    op.add_column(
        "intake_job", sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column(
        "intake_job", sa.Column("runs", sa.Integer(), server_default=sa.text("0"), nullable=False)
    )
    op.add_column(
        "intake_job",
        sa.Column("run_failures", sa.Integer(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column("intake_job", sa.Column("error_code", sa.Text(), nullable=True))
    op.add_column("intake_job", sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "intake_job_open_idx",
        "intake_job",
        ["status", "job_id"],
        unique=False,
        postgresql_where=sa.text("status IN ('enqueued', 'running', 'retrying')"),
    )
    op.drop_constraint("intake_job_status_known", "intake_job", type_="check")
    op.create_check_constraint("intake_job_status_known", "intake_job", _NEW_STATUSES)
    op.create_check_constraint(
        "intake_job_running_leased",
        "intake_job",
        "status <> 'running' OR (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)",
    )
    op.create_check_constraint(
        "intake_job_runs_nonnegative", "intake_job", "runs >= 0 AND run_failures >= 0"
    )
    _grant()


def _grant() -> None:
    # Two databases of one cluster may migrate at once: the loser of the race to
    # create the role sees duplicate_object and goes on.
    op.execute(
        "DO $$ BEGIN"
        f" IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN"
        f" CREATE ROLE {APP_ROLE} NOLOGIN;"
        " END IF;"
        " EXCEPTION WHEN duplicate_object THEN NULL;"
        " END $$"
    )
    op.execute(f"GRANT SELECT, INSERT, UPDATE ON {', '.join(_WRITTEN)} TO {APP_ROLE}")
    op.execute(f"GRANT SELECT, INSERT ON {', '.join(_APPENDED)} TO {APP_ROLE}")
    op.execute(f"GRANT SELECT ON capture TO {APP_ROLE}")
    op.execute(f"GRANT SELECT, UPDATE ON intake_job TO {APP_ROLE}")


def downgrade() -> None:
    """Downgrade schema: revoke the grants, move every job the worker touched back to
    'enqueued' (the old schema's last state; what the worker did is dropped with its
    tables), restore the old status check and drop the worker's columns and tables."""
    op.execute(f"REVOKE ALL ON {', '.join((*_WRITTEN, *_APPENDED))} FROM {APP_ROLE}")
    op.execute(f"REVOKE SELECT ON capture FROM {APP_ROLE}")
    op.execute(f"REVOKE SELECT, UPDATE ON intake_job FROM {APP_ROLE}")
    op.drop_constraint("intake_job_runs_nonnegative", "intake_job", type_="check")
    op.drop_constraint("intake_job_running_leased", "intake_job", type_="check")
    op.drop_constraint("intake_job_status_known", "intake_job", type_="check")
    op.execute(f"UPDATE intake_job SET status = 'enqueued' WHERE NOT ({_OLD_STATUSES})")
    op.create_check_constraint("intake_job_status_known", "intake_job", _OLD_STATUSES)
    op.drop_index(
        "intake_job_open_idx",
        table_name="intake_job",
        postgresql_where=sa.text("status IN ('enqueued', 'running', 'retrying')"),
    )
    op.drop_column("intake_job", "finished_at")
    op.drop_column("intake_job", "error_code")
    op.drop_column("intake_job", "run_failures")
    op.drop_column("intake_job", "runs")
    op.drop_column("intake_job", "lease_expires_at")
    op.drop_column("intake_job", "lease_owner")
    op.drop_table("capture_repair")
    op.drop_table("capture_claim")
    op.drop_index(
        "capture_item_open_idx",
        table_name="capture_item",
        postgresql_where=sa.text("outcome IN ('retryable', 'failed')"),
    )
    op.drop_index("capture_item_job_idx", table_name="capture_item")
    op.drop_table("capture_item")
    op.drop_table("capture_checkpoint")
    op.drop_table("source_item_state")
    op.drop_table("source_binding")
