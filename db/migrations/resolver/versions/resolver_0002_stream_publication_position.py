"""stream publication position

Replaces the relay's per-row ``outbox.published_at`` (and its partial index) with one
published-through position per stream in ``stream_publication``, and drops
``outbox.headers``: the Kafka headers are built from ``event_id`` and
``history_epoch``, which the row already holds.

Revision ID: resolver_0002
Revises: resolver_0001
Create Date: 2026-11-30 11:34:38.358037

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision: str = "resolver_0002"
down_revision: str | Sequence[str] | None = "resolver_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema.

    1. lock the outbox, so a relay of the old code cannot mark rows between the
       position computed in 3 and the column dropped in 4;
    2. create ``stream_publication``;
    3. give every stream the position just below its first unpublished row, or its
       cursor when it has none (every position it handed out is published, or was
       pruned after publication), so an upgraded database does not publish again
       what Kafka already has;
    4. drop the partial index, ``published_at`` and ``headers``.
    All in Alembic's one transaction: a failure leaves the old schema untouched.
    """
    op.execute("LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE")
    op.create_table(
        "stream_publication",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("history_epoch", sa.BigInteger(), nullable=False),
        sa.Column(
            "published_position", sa.BigInteger(), server_default=sa.text("0"), nullable=False
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "published_position >= 0", name="stream_publication_position_nonnegative"
        ),
        sa.PrimaryKeyConstraint("tenant_id", "catalog_id", "history_epoch"),
    )
    # The old relay marked each stream's rows in position order, so its published
    # rows are a prefix; taking the first unpublished row (through the partial index,
    # before it is dropped) stays right even if they were not.
    op.execute(
        "INSERT INTO stream_publication"
        " (tenant_id, catalog_id, history_epoch, published_position)"
        " SELECT c.tenant_id, c.catalog_id, c.history_epoch,"
        "  coalesce((SELECT min(o.position) - 1 FROM outbox o"
        "   WHERE o.tenant_id = c.tenant_id AND o.catalog_id = c.catalog_id"
        "   AND o.history_epoch = c.history_epoch AND o.published_at IS NULL),"
        "   c.position)"
        " FROM stream_cursor c"
    )
    op.drop_index(
        "outbox_unpublished_idx",
        table_name="outbox",
        postgresql_where=sa.text("published_at IS NULL"),
    )
    op.drop_column("outbox", "headers")
    op.drop_column("outbox", "published_at")


def downgrade() -> None:
    """Downgrade schema: stamp ``published_at`` on every row at or below its stream's
    position and rebuild the headers JSONB from the row's columns."""
    op.add_column("outbox", sa.Column("published_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column(
        "outbox",
        sa.Column(
            "headers",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
    )
    op.execute(
        "UPDATE outbox SET headers = jsonb_build_object("
        " 'event_id', event_id::text, 'history_epoch', history_epoch::text)"
    )
    op.execute(
        "UPDATE outbox o SET published_at = p.updated_at FROM stream_publication p"
        " WHERE o.tenant_id = p.tenant_id AND o.catalog_id = p.catalog_id"
        " AND o.history_epoch = p.history_epoch AND o.position <= p.published_position"
    )
    op.create_index(
        "outbox_unpublished_idx",
        "outbox",
        ["tenant_id", "catalog_id", "history_epoch", "position"],
        unique=False,
        postgresql_where=sa.text("published_at IS NULL"),
    )
    op.drop_table("stream_publication")
