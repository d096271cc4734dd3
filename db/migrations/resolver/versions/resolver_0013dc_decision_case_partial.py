"""decision case index: partial, on the decisions of a review case only

``decision_case_idx`` on ``(tenant_id, catalog_id, case_id)`` held every decision,
rule decisions (no case) too, and shared its leading columns with the primary key.
The foreign keys to ``decision`` (from ``catalog_item``, ``decision_effect`` and the
other facts) are checked with one cached plan per connection, planned when the
connection first checks one; on a young table whose statistics are not yet
gathered the planner could price the smaller case index below the primary key and
keep it, filtering ``decision_id`` over every decision of the stream: one check per
item and effect row, each costing the stream's decisions, until autovacuum next
analyzed the table. The bench saw 100-item decisions slow down by a further tenth
each second on such connections. Only decisions of a case need the index (``case_id
= …`` implies it is not null), and a partial index cannot serve the foreign-key
check, which names no ``case_id``.

Built and dropped ``CONCURRENTLY`` (outside the migration's transaction), so writers
are not held up on a large table. A crash between the steps leaves both indexes or
the new one under its temporary name; running the migration again finishes it (each
step is skipped when already done).

Revision ID: resolver_0013dc
Revises: resolver_0012ow
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "resolver_0013dc"
down_revision: str | Sequence[str] | None = "resolver_0012ow"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NEW = "decision_case_partial_idx"


def upgrade() -> None:
    """Upgrade schema: the partial index in place of the whole one."""
    with op.get_context().autocommit_block():
        # A build interrupted by a crash leaves an invalid index under the new name.
        op.execute(
            "DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c"
            f" ON c.oid = i.indexrelid WHERE c.relname = '{_NEW}' AND NOT i.indisvalid)"
            f" THEN EXECUTE 'DROP INDEX CONCURRENTLY {_NEW}'; END IF; END $$"
        )
        op.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {_NEW} ON decision"
            " (tenant_id, catalog_id, case_id) WHERE case_id IS NOT NULL"
        )
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS decision_case_idx")
    op.execute(f"ALTER INDEX {_NEW} RENAME TO decision_case_idx")


def downgrade() -> None:
    """Downgrade schema: the whole index again."""
    with op.get_context().autocommit_block():
        op.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {_NEW} ON decision"
            " (tenant_id, catalog_id, case_id)"
        )
        op.execute("DROP INDEX CONCURRENTLY IF EXISTS decision_case_idx")
    op.execute(f"ALTER INDEX {_NEW} RENAME TO decision_case_idx")
