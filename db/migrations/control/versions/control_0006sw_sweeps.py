"""sweeps: pause acknowledgements by process

``pause_ack_instance_idx``: the agents' sweep deletes the acknowledgements of
processes not seen for ``GAPLESS_PROCESS_RETENTION_SECONDS`` before the processes'
own rows, and looks them up by process (the primary key leads with the pause). No
existing row changes.

Revision ID: control_0006sw
Revises: control_0005rw
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "control_0006sw"
down_revision: str | Sequence[str] | None = "control_0005rw"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: one index."""
    op.create_index("pause_ack_instance_idx", "pause_ack", ["instance_id"])


def downgrade() -> None:
    """Downgrade schema: drop it."""
    op.drop_index("pause_ack_instance_idx", table_name="pause_ack")
