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
    ForeignKey,
    Index,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    Uuid,
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

# Pauses of a catalog's processing (a restore in progress): one open row per catalog
# at a time; a resumed pause stays as audit.
stream_pause = Table(
    "stream_pause",
    metadata,
    Column("pause_id", Uuid, primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("paused_by", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("paused_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("resumed_by", Text),
    Column("resumed_at", DateTime(timezone=True)),
    Index(
        "stream_pause_one_open",
        "tenant_id",
        "catalog_id",
        unique=True,
        postgresql_where=text("resumed_at IS NULL"),
    ),
)

# The running processes that honour pauses, each seen at its last check.
process_instance = Table(
    "process_instance",
    metadata,
    Column("instance_id", Text, primary_key=True),
    Column("role", Text, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("seen_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

# A process's acknowledgement that it holds a pause (``paused``: it starts no more
# work on the catalog and none it started is still running) or let it go.
pause_ack = Table(
    "pause_ack",
    metadata,
    Column("pause_id", Uuid, nullable=False),
    Column("instance_id", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("role", Text, nullable=False),
    Column("acked_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("pause_id", "instance_id", "state"),
    CheckConstraint("state IN ('paused', 'resumed')", name="pause_ack_state"),
)
# The sweep deletes a gone process's acknowledgements before its row (``db.control.sweeps``).
Index("pause_ack_instance_idx", pause_ack.c.instance_id)

# One fence of every catalog of a restored database (``gapless fence-epoch --all``),
# and its plan: each catalog with the epoch current when the run began.
fence_run = Table(
    "fence_run",
    metadata,
    Column("run_id", Uuid, primary_key=True),
    Column("requested_by", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

fence_run_catalog = Table(
    "fence_run_catalog",
    metadata,
    Column("run_id", Uuid, ForeignKey("fence_run.run_id"), nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("superseded_epoch", BigInteger, nullable=False),
    PrimaryKeyConstraint("run_id", "tenant_id", "catalog_id"),
)

# Streams whose resolver history went back without a fence (an unfenced restore): a
# delivery at a position a consumer already holds under another event id, or a
# consumer's report above the committed cursor. While a row is open, writes to the
# stream are refused (``HISTORY_REWOUND``); ``gapless fence-epoch`` closes it.
rewound_stream = Table(
    "rewound_stream",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("history_epoch", BigInteger, nullable=False),
    Column("signal", Text, nullable=False),
    Column("detail", Text, nullable=False),
    Column("flagged_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("cleared_at", DateTime(timezone=True)),
    Column("cleared_by", Text),
    PrimaryKeyConstraint("tenant_id", "catalog_id", "history_epoch"),
    CheckConstraint(
        "signal IN ('position_reused', 'report_beyond_committed')",
        name="rewound_stream_signal_known",
    ),
)

# The operations console's logins (``db.control.console``): one row per session, found
# by the SHA-256 of its id (the id itself lives only in the person's cookie), with the
# token's hash and its grant at login, and when it expires or was logged out.
console_session = Table(
    "console_session",
    metadata,
    Column("session_hash", Text, primary_key=True),
    Column("person", Text, nullable=False),
    Column("token_hash", Text, nullable=False),
    Column("scope", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("ended_at", DateTime(timezone=True)),
)
# The sweep at each login deletes sessions expired long ago.
Index("console_session_expires_idx", console_session.c.expires_at)

# Every action taken through the console, with who, what, on what, why and how it
# ended (``done``, ``refused`` with the error's code, ``failed``). An action that
# passed its checks is written ``started`` before it acts and completed once after
# (``ended_at``): a console that dies in between leaves it ``started``, never missing.
console_audit = Table(
    "console_audit",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("person", Text, nullable=False),
    Column("token_id", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("target", Text, nullable=False),
    Column("tenant_id", Text),
    Column("reason", Text, nullable=False),
    Column("outcome", Text, nullable=False),
    Column("code", Text),
    Column("detail", Text, nullable=False),
    Column("ended_at", DateTime(timezone=True)),
    CheckConstraint(
        "outcome IN ('started', 'done', 'refused', 'failed')", name="console_audit_outcome_known"
    ),
)
# The audit page of a tenant's operators, newest first.
Index("console_audit_tenant_idx", console_audit.c.tenant_id, console_audit.c.id)
