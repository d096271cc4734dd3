"""Resolver tables of retention control: what has been pruned, who still needs the
retained events (registered consumers and rebuild leases) and how far each has got.

They live on the resolver metadata, so the resolver migrations create them.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKeyConstraint,
    Index,
    Integer,
    PrimaryKeyConstraint,
    Table,
    Text,
    Uuid,
    func,
    text,
)

from db.tables.resolver import metadata

_STREAM = ("tenant_id", "catalog_id", "history_epoch")

# One row per stream under retention control; it is the stream's retention-control
# lock row (``db.resolver.retention.lock_retention``). Every outbox row of the stream at or
# below ``pruned_through`` has been deleted and every row above it is still there.
#
# No foreign key to ``stream_cursor``: the key check would take a KEY SHARE lock on
# the cursor row and so wait for any writer holding it FOR UPDATE; retention control
# must never wait for writers nor make them wait.
stream_retention = Table(
    "stream_retention",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("history_epoch", BigInteger, nullable=False),
    Column("pruned_through", BigInteger, nullable=False, server_default=text("0")),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint(*_STREAM),
    CheckConstraint("pruned_through >= 0", name="stream_retention_pruned_nonnegative"),
)

# A consumer registered on a stream and the durable progress it last reported:
# every position at or below ``reported_position`` is applied on its side. NULL
# means it never reported, which holds the retention floor at 0. The column only
# moves forward. Rows are removed only by an operator (deregistration).
#
# ``needs_rebuild_since`` is set when the consumer's first report (progress still
# unknown) fell below ``pruned_through``: it needs events that are gone, so only a
# rebuild can bring it back. ``refused_position`` is what it reported then. Both
# are cleared by the first report at or above ``pruned_through``.
stream_consumer = Table(
    "stream_consumer",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("history_epoch", BigInteger, nullable=False),
    Column("consumer_id", Text, nullable=False),
    Column("reported_position", BigInteger),
    Column("registered_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("reported_at", DateTime(timezone=True)),
    Column("needs_rebuild_since", DateTime(timezone=True)),
    Column("refused_position", BigInteger),
    # When a report last raised ``reported_position`` (a repeat leaves it).
    Column("progressed_at", DateTime(timezone=True)),
    PrimaryKeyConstraint(*_STREAM, "consumer_id"),
    ForeignKeyConstraint(
        list(_STREAM),
        [f"stream_retention.{c}" for c in _STREAM],
        name="stream_consumer_retention_fk",
    ),
    CheckConstraint("reported_position >= 0", name="stream_consumer_position_nonnegative"),
    CheckConstraint(
        "(needs_rebuild_since IS NULL) = (refused_position IS NULL)",
        name="stream_consumer_refusal_complete",
    ),
)

# A standing consumer holds every stream, also the ones it has not seen yet: on a
# stream where it has no ``stream_consumer`` row it holds the floor at 0, as a
# registered consumer that never reported does. Declared by the retention service
# from ``GAPLESS_RETENTION_CONSUMERS`` or by an operator; removed only by an
# operator (``gapless consumers retire``).
standing_consumer = Table(
    "standing_consumer",
    metadata,
    Column("consumer_id", Text, nullable=False),
    Column("declared_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("declared_by", Text, nullable=False),
    PrimaryKeyConstraint("consumer_id"),
)

# A rebuild's lease: while it is neither released nor expired, no outbox row above
# ``pinned_position`` may be pruned. The pin only moves forward; an expired lease is
# never revived (the rebuild starts over with a new one).
rebuild_lease = Table(
    "rebuild_lease",
    metadata,
    Column("lease_id", Uuid, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("history_epoch", BigInteger, nullable=False),
    Column("holder", Text, nullable=False),
    Column("pinned_position", BigInteger, nullable=False),
    Column("ttl_seconds", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("released_at", DateTime(timezone=True)),
    PrimaryKeyConstraint("lease_id"),
    ForeignKeyConstraint(
        list(_STREAM),
        [f"stream_retention.{c}" for c in _STREAM],
        name="rebuild_lease_retention_fk",
    ),
    CheckConstraint("pinned_position >= 0", name="rebuild_lease_pin_nonnegative"),
    CheckConstraint("ttl_seconds > 0", name="rebuild_lease_ttl_positive"),
)
# The pruner and the status report read a stream's unreleased leases.
Index(
    "rebuild_lease_unreleased_idx",
    rebuild_lease.c.tenant_id,
    rebuild_lease.c.catalog_id,
    rebuild_lease.c.history_epoch,
    postgresql_where=rebuild_lease.c.released_at.is_(None),
)
