"""claims inline: a result's claims are a column of its row

``capture_claim`` held one row per field a result claimed, each checking its
foreign key to the result: about fifteen rows a product, a third of what the
capture worker made PostgreSQL do. Nothing reads claims in the write path; they are
written once, with the result's terminal outcome, and go with the result. So they
become ``capture_item.claims``, ``{field: [value, locator]}``, set by the statement
that settles the result.

The upgrade copies every result's claims into its row, then drops the table; the
downgrade recreates the table from the column. Both run in the migration's
transaction: a crash leaves the schema as it was.

Revision ID: resolver_0016cl
Revises: resolver_0015ob
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "resolver_0016cl"
down_revision: str | Sequence[str] | None = "resolver_0015ob"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_RESULT = ("tenant_id", "capture_id", "source_item_id", "parser_version")


def upgrade() -> None:
    """Upgrade schema: claims into their results' rows, then no claim table."""
    op.add_column("capture_item", sa.Column("claims", JSONB()))
    op.execute(
        "UPDATE capture_item AS r SET claims = c.claims"
        " FROM (SELECT tenant_id, capture_id, source_item_id, parser_version,"
        " jsonb_object_agg(field, jsonb_build_array(value, locator)) AS claims"
        " FROM capture_claim GROUP BY tenant_id, capture_id, source_item_id, parser_version) c"
        " WHERE (r.tenant_id, r.capture_id, r.source_item_id, r.parser_version)"
        " = (c.tenant_id, c.capture_id, c.source_item_id, c.parser_version)"
    )
    op.drop_table("capture_claim")


def downgrade() -> None:
    """Downgrade schema: the claim table again, filled from the column."""
    op.create_table(
        "capture_claim",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("capture_id", sa.Uuid(), nullable=False),
        sa.Column("source_item_id", sa.Text(), nullable=False),
        sa.Column("parser_version", sa.Integer(), nullable=False),
        sa.Column("field", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("locator", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint(*_RESULT, "field"),
        sa.ForeignKeyConstraint(
            list(_RESULT),
            [f"capture_item.{c}" for c in _RESULT],
            name="capture_claim_item_fk",
        ),
    )
    op.execute(
        "INSERT INTO capture_claim (tenant_id, capture_id, source_item_id, parser_version,"
        " field, value, locator) SELECT r.tenant_id, r.capture_id, r.source_item_id,"
        " r.parser_version, c.key, c.value ->> 0, c.value ->> 1"
        " FROM capture_item r CROSS JOIN LATERAL jsonb_each(r.claims) AS c"
        " WHERE r.claims IS NOT NULL"
    )
    op.drop_column("capture_item", "claims")
