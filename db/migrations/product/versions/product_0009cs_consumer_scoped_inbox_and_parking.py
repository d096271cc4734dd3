"""inbox and parking per consumer; joins the parked-origin and rebuild branches

``inbox``, ``parked_event`` and ``parked_dependency`` gain ``consumer`` as the first
column of their keys (and of the stream-position and dependency-target indexes), so
two consumers of one stream (the live one and a shadow rebuild's) keep their own
dedupe, outcomes and parked events. Existing rows belong to the consumer whose
progress row covers their stream (the smallest name if several; ``product-applier``,
the default consumer, if none), which is the only consumer these tables could have
served before this revision.

Revision ID: product_0009cs
Revises: product_0008pk, product_0008rb
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "product_0009cs"
down_revision: str | Sequence[str] | None = ("product_0008pk", "product_0008rb")
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OWNER = (
    "coalesce((SELECT min(p.consumer) FROM stream_progress p WHERE p.tenant_id = {t}.tenant_id"
    " AND p.catalog_id = {t}.catalog_id AND p.history_epoch = {t}.history_epoch),"
    " 'product-applier')"
)


def upgrade() -> None:
    """Upgrade schema: add, fill and key on ``consumer`` (rewrites the three tables)."""
    for table in ("inbox", "parked_event", "parked_dependency"):
        op.add_column(table, sa.Column("consumer", sa.Text(), nullable=True))
    op.execute(f"UPDATE inbox SET consumer = {_OWNER.format(t='inbox')}")
    op.execute(f"UPDATE parked_event SET consumer = {_OWNER.format(t='parked_event')}")
    op.execute(
        "UPDATE parked_dependency d SET consumer = coalesce((SELECT e.consumer"
        " FROM parked_event e WHERE e.event_id = d.event_id), 'product-applier')"
    )
    for table in ("inbox", "parked_event", "parked_dependency"):
        op.alter_column(table, "consumer", nullable=False)
    op.drop_constraint("inbox_pkey", "inbox", type_="primary")
    op.create_primary_key("inbox_pkey", "inbox", ["consumer", "event_id"])
    op.drop_constraint("parked_event_pkey", "parked_event", type_="primary")
    op.create_primary_key("parked_event_pkey", "parked_event", ["consumer", "event_id"])
    op.drop_constraint("parked_dependency_pkey", "parked_dependency", type_="primary")
    op.create_primary_key(
        "parked_dependency_pkey",
        "parked_dependency",
        ["consumer", "event_id", "aggregate_type", "aggregate_id"],
    )
    op.drop_index("inbox_stream_position_idx", table_name="inbox")
    op.create_index(
        "inbox_stream_position_idx",
        "inbox",
        ["consumer", "tenant_id", "catalog_id", "history_epoch", "position"],
    )
    op.drop_index("parked_dependency_target_idx", table_name="parked_dependency")
    op.create_index(
        "parked_dependency_target_idx",
        "parked_dependency",
        ["consumer", "tenant_id", "catalog_id", "aggregate_type", "aggregate_id"],
    )


def downgrade() -> None:
    """Downgrade schema: keep one row per event id (the smallest consumer's) and drop
    the column."""
    op.drop_index("parked_dependency_target_idx", table_name="parked_dependency")
    op.create_index(
        "parked_dependency_target_idx",
        "parked_dependency",
        ["tenant_id", "catalog_id", "aggregate_type", "aggregate_id"],
    )
    op.drop_index("inbox_stream_position_idx", table_name="inbox")
    op.create_index(
        "inbox_stream_position_idx",
        "inbox",
        ["tenant_id", "catalog_id", "history_epoch", "position"],
    )
    for table, rest in (
        ("parked_dependency", ["event_id", "aggregate_type", "aggregate_id"]),
        ("parked_event", ["event_id"]),
        ("inbox", ["event_id"]),
    ):
        keys = " AND ".join(f"a.{c} = b.{c}" for c in rest)
        op.execute(
            f"DELETE FROM {table} a USING {table} b WHERE {keys} AND a.consumer > b.consumer"
        )
        op.drop_constraint(f"{table}_pkey", table, type_="primary")
        op.create_primary_key(f"{table}_pkey", table, rest)
        op.drop_column(table, "consumer")
