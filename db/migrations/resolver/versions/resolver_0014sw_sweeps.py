"""sweeps: what the resolver's retention sweeps need

``snapshot_export_lease_idx``: a rebuild lease is deleted only once no export row
names it, and deleting one checks the export rows' foreign key to it; both look
export rows up by lease. The services may now delete export rows: the pruner's
export retention deletes rows it marked ``deleted`` once
``GAPLESS_EXPORT_ROWS_RETENTION_SECONDS`` have passed (their objects went first).
No existing row changes.

Revision ID: resolver_0014sw
Revises: resolver_0013dc
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from db.tables.domain import APP_ROLE

revision: str = "resolver_0014sw"
down_revision: str | Sequence[str] | None = "resolver_0013dc"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: the index by lease; DELETE on export rows for the services."""
    op.create_index("snapshot_export_lease_idx", "snapshot_export", ["lease_id"])
    op.execute(f"GRANT DELETE ON snapshot_export TO {APP_ROLE}")


def downgrade() -> None:
    """Downgrade schema: no DELETE again; drop the index."""
    op.execute(f"REVOKE DELETE ON snapshot_export FROM {APP_ROLE}")
    op.drop_index("snapshot_export_lease_idx", table_name="snapshot_export")
