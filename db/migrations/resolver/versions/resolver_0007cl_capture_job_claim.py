"""capture job claim: the worker's hold on a running job is a claim, not a lease

Renames ``intake_job``'s ``lease_owner`` and ``lease_expires_at`` to ``claim_owner``
and ``claim_expires_at``, and the check ``intake_job_running_leased`` to
``intake_job_running_claimed`` (its expression follows the columns). "Lease" is
kept for the rebuild leases of ``rebuild_lease``. Renames only: no row is
rewritten, the grants (on the table) stay, and a claim in force stays in force.
A worker of the previous release still running after this revision fails its
claim statements and aborts its run; the job resumes from its checkpoint once the
claim has expired, under a worker of this release. Stop the old workers first.

Revision ID: resolver_0007cl
Revises: resolver_0006
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "resolver_0007cl"
down_revision: str | Sequence[str] | None = "resolver_0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = (("lease_owner", "claim_owner"), ("lease_expires_at", "claim_expires_at"))
_CHECK = ("intake_job_running_leased", "intake_job_running_claimed")


def upgrade() -> None:
    """Upgrade schema: lease names to claim names."""
    for old, new in _COLUMNS:
        op.alter_column("intake_job", old, new_column_name=new)
    op.execute(f"ALTER TABLE intake_job RENAME CONSTRAINT {_CHECK[0]} TO {_CHECK[1]}")


def downgrade() -> None:
    """Downgrade schema: claim names back to lease names."""
    op.execute(f"ALTER TABLE intake_job RENAME CONSTRAINT {_CHECK[1]} TO {_CHECK[0]}")
    for old, new in _COLUMNS:
        op.alter_column("intake_job", new, new_column_name=old)
