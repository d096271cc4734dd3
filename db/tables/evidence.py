"""Resolver tables of evidence retention: the regression fixtures that pin a
capture's artifact, the audit of every deletion the evidence sweep makes, and the
artifacts found referenced but missing from the object store.

They live on the resolver metadata, so the resolver migrations create them (from
``resolver_0008ev``). What keeps an artifact is listed in
``producers.capture.evidence_retention`` (its package docstring).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKeyConstraint,
    Identity,
    Index,
    PrimaryKeyConstraint,
    Table,
    Text,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

from db.tables.resolver import metadata

# A regression fixture resting on a capture: while the row exists the capture, its
# derived rows and its artifact are kept. The foreign key holds that in PostgreSQL
# too: a pinned capture cannot be deleted.
evidence_fixture = Table(
    "evidence_fixture",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("capture_id", Uuid, nullable=False),
    Column("fixture", Text, nullable=False),
    Column("pinned_by", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("tenant_id", "capture_id", "fixture"),
    ForeignKeyConstraint(
        ["tenant_id", "capture_id"],
        ["capture.tenant_id", "capture.capture_id"],
        name="evidence_fixture_capture_fk",
    ),
    CheckConstraint(
        "fixture <> '' AND pinned_by <> '' AND reason <> ''", name="evidence_fixture_named"
    ),
)

DELETION_KINDS = ("capture", "object")
DELETION_REASONS = ("expired", "orphan")
DELETION_STATUSES = ("pending", "done", "cancelled")

# Every deletion of the evidence sweep, recorded before or with what it deletes.
# ``capture``: a capture and its derived rows, deleted in the transaction that writes
# this row (``derived`` counts them per table), so it is ``done`` at once. ``object``:
# an artifact in the bucket, written ``pending`` before the object is deleted and
# made ``done`` in the transaction that deletes it (``cancelled``: a capture named the
# key again first). A pending row is the sweep's own to-do list across crashes.
evidence_deletion = Table(
    "evidence_deletion",
    metadata,
    Column("id", BigInteger, Identity(always=True), nullable=False),
    Column("kind", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("evidence_key", Text, nullable=False),
    Column("tenant_id", Text),
    Column("capture_id", Uuid),
    Column("derived", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("status", Text, nullable=False),
    Column("swept_by", Text, nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("completed_at", DateTime(timezone=True)),
    PrimaryKeyConstraint("id"),
    CheckConstraint("kind IN ('capture', 'object')", name="evidence_deletion_kind_known"),
    CheckConstraint("reason IN ('expired', 'orphan')", name="evidence_deletion_reason_known"),
    CheckConstraint(
        "status IN ('pending', 'done', 'cancelled')", name="evidence_deletion_status_known"
    ),
    CheckConstraint(
        "kind <> 'capture' OR (tenant_id IS NOT NULL AND capture_id IS NOT NULL"
        " AND status = 'done')",
        name="evidence_deletion_capture_named",
    ),
    CheckConstraint(
        "(status = 'pending') = (completed_at IS NULL)", name="evidence_deletion_completed"
    ),
)
# An intake counts the finished object deletions of its key (see
# ``producers.capture.intake.captures``); the sweep finds its pending ones.
Index(
    "evidence_deletion_object_idx",
    evidence_deletion.c.evidence_key,
    postgresql_where=text("kind = 'object'"),
)
Index(
    "evidence_deletion_pending_idx",
    evidence_deletion.c.id,
    postgresql_where=text("status = 'pending'"),
)

# An artifact some kept capture names that the last sweep did not find in the
# bucket. Never deleted by the sweep while a capture names it: the row goes when the
# object is back (restored) or no capture names the key any more.
evidence_missing = Table(
    "evidence_missing",
    metadata,
    Column("evidence_key", Text, nullable=False),
    Column("first_seen_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("checked_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("evidence_key"),
)
