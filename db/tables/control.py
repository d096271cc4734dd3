"""Control database tables: the trusted history-epoch authority.

This database is never restored together with the resolver database, so the epoch it
holds stays trustworthy after a resolver restore (DESIGN §8).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    func,
    text,
)

metadata = MetaData()

# The current epoch per tenant/catalog.
history_epoch = Table(
    "history_epoch",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("issued_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("reason", Text, nullable=False),
    PrimaryKeyConstraint("tenant_id", "catalog_id"),
    CheckConstraint("epoch >= 1", name="history_epoch_positive"),
)

# Every epoch ever issued, for audit.
history_epoch_log = Table(
    "history_epoch_log",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("issued_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("reason", Text, nullable=False),
    # Who issued it (an operator, or ``writer`` for a first epoch), and the epoch it
    # fenced (null for a first epoch).
    Column("issued_by", Text, nullable=False, server_default=text("'writer'")),
    Column("superseded_epoch", BigInteger),
    PrimaryKeyConstraint("tenant_id", "catalog_id", "epoch"),
)
