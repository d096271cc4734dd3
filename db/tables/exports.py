"""Resolver table of snapshot exports: one row per export a rebuild asked for.

The objects live in the exports bucket (``schemas.exports``); the row says where an
export stands, what it holds once ready (its position W and the manifest's
SHA-256) and, for retention, when its objects were deleted.
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

# ``status``: writing (its snapshot is being written; ``heartbeat_at`` moves with
# every chunk), ready (every chunk and the manifest are written, the lease was live
# and the epoch current when it became ready), failed (``error_code`` says why),
# deleted (its objects are gone: superseded by newer exports, or failed/abandoned).
snapshot_export = Table(
    "snapshot_export",
    metadata,
    Column("export_id", Uuid, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("history_epoch", BigInteger, nullable=False),
    Column("lease_id", Uuid, nullable=False),
    Column("requested_by", Text, nullable=False),
    Column("status", Text, nullable=False, server_default=text("'writing'")),
    Column("position", BigInteger),
    Column("chunks", Integer, nullable=False, server_default=text("0")),
    Column("records", BigInteger, nullable=False, server_default=text("0")),
    Column("manifest_key", Text),
    Column("manifest_sha256", Text),
    Column("error_code", Text),
    Column("error_message", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("heartbeat_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("ready_at", DateTime(timezone=True)),
    Column("deleted_at", DateTime(timezone=True)),
    PrimaryKeyConstraint("export_id"),
    ForeignKeyConstraint(["lease_id"], ["rebuild_lease.lease_id"], name="snapshot_export_lease_fk"),
    CheckConstraint(
        "status IN ('writing', 'ready', 'failed', 'deleted')", name="snapshot_export_status_known"
    ),
    CheckConstraint(
        "status <> 'ready' OR (position IS NOT NULL AND manifest_sha256 IS NOT NULL"
        " AND ready_at IS NOT NULL)",
        name="snapshot_export_ready_complete",
    ),
    CheckConstraint(
        "status <> 'failed' OR error_code IS NOT NULL", name="snapshot_export_failed_has_code"
    ),
)
# Export retention walks a stream's exports newest first.
Index(
    "snapshot_export_stream_idx",
    snapshot_export.c.tenant_id,
    snapshot_export.c.catalog_id,
    snapshot_export.c.history_epoch,
    snapshot_export.c.created_at,
)
# A lease goes only once no export row names it (and its deletion checks the foreign
# key): export rows looked up by lease (``db.resolver.sweeps``).
Index("snapshot_export_lease_idx", snapshot_export.c.lease_id)
