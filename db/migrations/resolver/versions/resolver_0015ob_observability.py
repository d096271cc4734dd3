"""observability: what lag in seconds and tracing need

``stream_consumer.progressed_at``: when a consumer's report last raised its
position (a report that repeats the position leaves it), so "how long has progress
been unchanged while events wait" is read, not guessed. ``outbox.trace_context``
and ``intake_job.trace_context``: the W3C ``traceparent`` of the operation that
wrote the row, when tracing is on, so the relay and the capture worker continue
that trace. All three are nullable and added without a default: no existing row is
rewritten, and a row written before (or with tracing off) simply has none.

Revision ID: resolver_0015ob
Revises: resolver_0014sw
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "resolver_0015ob"
down_revision: str | Sequence[str] | None = "resolver_0014sw"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: three nullable columns."""
    op.add_column("stream_consumer", sa.Column("progressed_at", sa.DateTime(timezone=True)))
    op.add_column("outbox", sa.Column("trace_context", sa.Text()))
    op.add_column("intake_job", sa.Column("trace_context", sa.Text()))


def downgrade() -> None:
    """Downgrade schema: drop them."""
    op.drop_column("intake_job", "trace_context")
    op.drop_column("outbox", "trace_context")
    op.drop_column("stream_consumer", "progressed_at")
