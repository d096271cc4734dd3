"""Resolver database tables: stream cursors, the outbox, the relay's published
positions and accepted catalog state."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKeyConstraint,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData()

# One row per stream (tenant, catalog, history epoch). ``position`` is the committed
# cursor: the last position handed out. Writers lock this row FOR UPDATE, so positions
# are allocated in commit order and a rollback hands none out.
stream_cursor = Table(
    "stream_cursor",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("history_epoch", BigInteger, nullable=False),
    Column("position", BigInteger, nullable=False, server_default=text("0")),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # Set once, when the stream's epoch is fenced (a newer one was issued after a
    # restore): no more writes, nothing more published; its rows stay as history.
    Column("fenced_at", DateTime(timezone=True)),
    Column("fenced_for_epoch", BigInteger),
    PrimaryKeyConstraint("tenant_id", "catalog_id", "history_epoch"),
    CheckConstraint("position >= 0", name="stream_cursor_position_nonnegative"),
    CheckConstraint(
        "(fenced_at IS NULL) = (fenced_for_epoch IS NULL)"
        " AND (fenced_for_epoch IS NULL OR fenced_for_epoch > history_epoch)",
        name="stream_cursor_fence_complete",
    ),
)

# Encoded messages, written once by the writer in the same transaction as the facts.
# The relay and the retained-events API ship ``key`` and ``value`` as stored; the
# Kafka headers are a function of ``event_id``, ``history_epoch`` and
# ``trace_context`` (``kafka_headers`` in ``schemas.codec``), so they are not stored
# a second time. Which rows are published is not a property of the row: see
# ``stream_publication``. The primary key serves the relay's range read
# ``position > published_position ORDER BY position``.
outbox = Table(
    "outbox",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("history_epoch", BigInteger, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("event_id", Uuid, nullable=False, unique=True),
    Column("event_type", Text, nullable=False),
    Column("key", LargeBinary, nullable=False),
    Column("value", LargeBinary, nullable=False),
    Column("committed_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # The writing operation's W3C traceparent when tracing is on (else NULL).
    Column("trace_context", Text),
    PrimaryKeyConstraint("tenant_id", "catalog_id", "history_epoch", "position"),
    ForeignKeyConstraint(
        ["tenant_id", "catalog_id", "history_epoch"],
        [stream_cursor.c.tenant_id, stream_cursor.c.catalog_id, stream_cursor.c.history_epoch],
        name="outbox_stream_fk",
    ),
    CheckConstraint("position >= 1", name="outbox_position_positive"),
)

# One row per stream the relay has published from: every outbox position up to
# ``published_position`` has been confirmed by Kafka. Only the relay writes it, once
# per batch, and only forwards (``GREATEST``); a stream without a row has published
# nothing. The unpublished rows of a stream are its outbox rows above this position,
# and a stream has work when its cursor is ahead of it.
#
# A table of its own rather than a column of ``stream_cursor``: writers hold the
# cursor row FOR UPDATE until they commit, and the relay must neither wait for them
# nor make them wait. For the same reason there is no foreign key to
# ``stream_cursor``: the key check of the relay's first INSERT would take a KEY SHARE
# lock on the cursor row and so wait for any writer holding it.
stream_publication = Table(
    "stream_publication",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("history_epoch", BigInteger, nullable=False),
    Column("published_position", BigInteger, nullable=False, server_default=text("0")),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("tenant_id", "catalog_id", "history_epoch"),
    CheckConstraint("published_position >= 0", name="stream_publication_position_nonnegative"),
)

ITEM_STATUSES = ("active", "split", "retired")

SCOPE = ("tenant_id", "catalog_id")
"""The leading columns of every catalog-scoped key: references never cross a catalog."""


def decision_fk(name: str, column: str = "decision_id") -> ForeignKeyConstraint:
    """(tenant, catalog, ``column``) → the decision a fact rests on (INV-05)."""
    return ForeignKeyConstraint(
        [*SCOPE, column],
        ["decision.tenant_id", "decision.catalog_id", "decision.decision_id"],
        name=name,
    )


def item_fk(name: str, column: str) -> ForeignKeyConstraint:
    """(tenant, catalog, ``column``) → a catalog item of the same catalog."""
    return ForeignKeyConstraint(
        [*SCOPE, column],
        ["catalog_item.tenant_id", "catalog_item.catalog_id", "catalog_item.item_id"],
        name=name,
    )


# The first accepted aggregate. ``parent_item_id`` makes an item depend on another
# item of the same catalog (a variant on its product), so events carry dependencies.
# ``decision_id`` names the decision that accepted the current revision (INV-05); the
# ``decision`` table is in ``db.tables.domain``.
catalog_item = Table(
    "catalog_item",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("item_id", Text, nullable=False),
    Column("class_id", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("title", Text, nullable=False),
    Column("parent_item_id", Text),
    Column("attributes", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("revision", Integer, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("decision_id", Uuid, nullable=False),
    PrimaryKeyConstraint("tenant_id", "catalog_id", "item_id"),
    ForeignKeyConstraint(
        ["tenant_id", "catalog_id", "parent_item_id"],
        ["catalog_item.tenant_id", "catalog_item.catalog_id", "catalog_item.item_id"],
        name="catalog_item_parent_fk",
    ),
    ForeignKeyConstraint(
        ["tenant_id", "catalog_id", "decision_id"],
        ["decision.tenant_id", "decision.catalog_id", "decision.decision_id"],
        name="catalog_item_decision_fk",
    ),
    CheckConstraint("status IN ('active', 'split', 'retired')", name="catalog_item_status_known"),
    CheckConstraint("revision >= 1", name="catalog_item_revision_positive"),
)
