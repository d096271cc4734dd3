"""outbox write check: the stream writer's counts checked by the server

``outbox_written(rows, expected, cursors)`` raises unless the outbox statement
inserted every row it was given and moved exactly one cursor row. The stream writer
calls it in the same statement, so a short write fails that statement and the
transaction's COMMIT, sent in the same round trip, rolls back instead of committing
it. No table changes.

Revision ID: resolver_0012ow
Revises: resolver_0011uj
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "resolver_0012ow"
down_revision: str | Sequence[str] | None = "resolver_0011uj"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: the function (executable by every role, as functions are)."""
    op.execute(
        """
CREATE FUNCTION outbox_written(written bigint, expected bigint, cursors bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  IF written IS DISTINCT FROM expected OR cursors IS DISTINCT FROM 1 THEN
    RAISE EXCEPTION 'outbox write incomplete: % of % rows, % cursor rows moved',
      written, expected, cursors
      USING ERRCODE = 'data_exception', HINT = 'the transaction is rolled back; retry it';
  END IF;
  RETURN true;
END $$
"""
    )


def downgrade() -> None:
    """Downgrade schema: drop it."""
    op.execute("DROP FUNCTION outbox_written(bigint, bigint, bigint)")
