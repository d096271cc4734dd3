"""write expected: the check of a write joined into one statement

``write_expected(what, got, expected)`` raises SQLSTATE ``GL409`` unless a part of a
joined write (``db.joined_write``) returned the number of rows the write depended
on: the stream cursor moved from the position read without its lock, every cited
capture held. The statement then fails as a whole and writes nothing; the Unit of
Work redoes its work under the cursor lock. No table changes.

Revision ID: resolver_0017wx
Revises: resolver_0016cl
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "resolver_0017wx"
down_revision: str | Sequence[str] | None = "resolver_0016cl"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: the function (executable by every role, as functions are)."""
    op.execute(
        """
CREATE FUNCTION write_expected(what text, got bigint, expected bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  IF got IS DISTINCT FROM expected THEN
    RAISE EXCEPTION 'the write depended on % (% rows, % expected)', what, got, expected
      USING ERRCODE = 'GL409', HINT = 'nothing was written; redo the work under the lock';
  END IF;
  RETURN true;
END $$
"""
    )


def downgrade() -> None:
    """Downgrade schema: drop it."""
    op.execute("DROP FUNCTION write_expected(text, bigint, bigint)")
