"""Resolver tables of capture intake (AW-02): collector instances and their rotating
credentials, captures, receipts and intake jobs.

They live on the resolver metadata, so the resolver migrations create them. Every
stable identity is a unique constraint whose leading column is the tenant.
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
    UniqueConstraint,
    Uuid,
    func,
    text,
)

from db.tables.resolver import metadata

_INSTANCE = ("tenant_id", "source", "instance_id")

# A collector instance: the stable identity that owns captures and receipts. It
# outlives every credential issued to it.
collector_instance = Table(
    "collector_instance",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("instance_id", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint(*_INSTANCE),
)

# A credential (the JWT ``sub``/``client_id``) mapped to its instance. Rotation adds a
# row with a new client_id for the same instance; revocation sets ``revoked_at``.
# Rows are never deleted, so an old client_id can never be re-registered elsewhere.
collector_credential = Table(
    "collector_credential",
    metadata,
    Column("client_id", Text, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("instance_id", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("revoked_at", DateTime(timezone=True)),
    PrimaryKeyConstraint("client_id"),
    ForeignKeyConstraint(
        list(_INSTANCE),
        [f"collector_instance.{c}" for c in _INSTANCE],
        name="collector_credential_instance_fk",
    ),
)
Index(
    "collector_credential_instance_idx",
    collector_credential.c.tenant_id,
    collector_credential.c.source,
    collector_credential.c.instance_id,
)

# A posted capture: what was captured, and where its artifact is kept. ``capture_id``
# is derived from the instance and the idempotency key, so a retried post names the
# same capture. The artifact is content-addressed (``evidence_key``).
capture = Table(
    "capture",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("capture_id", Uuid, nullable=False),
    Column("source", Text, nullable=False),
    Column("instance_id", Text, nullable=False),
    Column("schema_version", Integer, nullable=False),
    Column("source_url", Text, nullable=False),
    Column("captured_at", DateTime(timezone=True), nullable=False),
    Column("content_type", Text, nullable=False),
    Column("content_sha256", Text, nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("evidence_key", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("tenant_id", "capture_id"),
    ForeignKeyConstraint(
        list(_INSTANCE),
        [f"collector_instance.{c}" for c in _INSTANCE],
        name="capture_instance_fk",
    ),
    CheckConstraint("size_bytes >= 0", name="capture_size_nonnegative"),
    CheckConstraint("content_sha256 ~ '^[0-9a-f]{64}$'", name="capture_sha256_hex"),
)
# The evidence sweep: whether any capture (of any tenant) still names an artifact,
# and the captures old enough to expire, oldest first.
Index("capture_evidence_key_idx", capture.c.evidence_key)
Index("capture_created_idx", capture.c.created_at, capture.c.tenant_id, capture.c.capture_id)

# The collector's acknowledgement of one post. The unique key is the idempotency
# contract: one receipt per (instance, idempotency key); ``request_fingerprint``
# tells a retry of the same request from a different request reusing the key.
receipt = Table(
    "receipt",
    metadata,
    Column("receipt_id", Uuid, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("instance_id", Text, nullable=False),
    Column("idempotency_key", Text, nullable=False),
    Column("request_fingerprint", Text, nullable=False),
    Column("capture_id", Uuid, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("receipt_id"),
    UniqueConstraint(*_INSTANCE, "idempotency_key", name="receipt_idempotency_key"),
    ForeignKeyConstraint(
        ["tenant_id", "capture_id"],
        ["capture.tenant_id", "capture.capture_id"],
        name="receipt_capture_fk",
    ),
)
# The evidence sweep deletes a capture's receipts with it.
Index("receipt_capture_idx", receipt.c.tenant_id, receipt.c.capture_id)

JOB_STATUSES = ("pending", "enqueued", "running", "retrying", "done", "failed", "skipped")
FINISHED_JOB_STATUSES = ("done", "failed", "skipped")

# Work to do on a capture, with a deterministic id (from the capture and the kind).
# ``pending`` until the jobs topic has confirmed the message, then ``enqueued``; the
# sweeper re-enqueues pending jobs once ``next_attempt_at`` has passed. ``attempts``
# counts enqueue attempts.
#
# The capture worker (``producers.capture.worker``) claims a job by moving it to ``running``
# (``claim_owner`` holds it until ``claim_expires_at``, renewed while it works;
# ``runs`` counts claims).
# A run ends ``done`` (every product terminal), ``retrying`` (some wait for a retry
# at ``next_attempt_at``; ``run_failures`` counts the job-level ones against their
# budget) or ``failed`` (``error_code`` says why: the capture cannot be processed,
# or products ran out of retries); an operator may retry it or mark it ``skipped``.
# Only ``db.repositories.capture_jobs`` writes these rows (a test holds every other
# module to that).
intake_job = Table(
    "intake_job",
    metadata,
    Column("job_id", Uuid, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("capture_id", Uuid, nullable=False),
    Column("kind", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", DateTime(timezone=True), nullable=False),
    Column("last_error", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("enqueued_at", DateTime(timezone=True)),
    Column("claim_owner", Text),
    Column("claim_expires_at", DateTime(timezone=True)),
    Column("runs", Integer, nullable=False, server_default=text("0")),
    Column("run_failures", Integer, nullable=False, server_default=text("0")),
    Column("error_code", Text),
    Column("finished_at", DateTime(timezone=True)),
    # The accepting request's W3C traceparent when tracing is on (else NULL).
    Column("trace_context", Text),
    PrimaryKeyConstraint("job_id"),
    UniqueConstraint("tenant_id", "capture_id", "kind", name="intake_job_capture_kind"),
    ForeignKeyConstraint(
        ["tenant_id", "capture_id"],
        ["capture.tenant_id", "capture.capture_id"],
        name="intake_job_capture_fk",
    ),
    CheckConstraint(
        f"status IN ({', '.join(repr(s) for s in JOB_STATUSES)})", name="intake_job_status_known"
    ),
    CheckConstraint("attempts >= 0", name="intake_job_attempts_nonnegative"),
    CheckConstraint(
        "status <> 'running' OR (claim_owner IS NOT NULL AND claim_expires_at IS NOT NULL)",
        name="intake_job_running_claimed",
    ),
    CheckConstraint("runs >= 0 AND run_failures >= 0", name="intake_job_runs_nonnegative"),
)
# The sweeper's scan: due pending jobs in (next_attempt_at, job_id) order.
Index(
    "intake_job_pending_idx",
    intake_job.c.next_attempt_at,
    intake_job.c.job_id,
    postgresql_where=intake_job.c.status == "pending",
)
# The worker's repair scan: jobs that are due (retrying), orphaned (enqueued, their
# message lost) or abandoned (running under an expired claim).
Index(
    "intake_job_open_idx",
    intake_job.c.status,
    intake_job.c.job_id,
    postgresql_where=text("status IN ('enqueued', 'running', 'retrying')"),
)

# A job the worker was asked to run (by a job message, or a run under way) whose
# ``intake_job`` row the resolver database does not hold: its capture expired and
# was swept, or the database was restored from a backup taken before the capture was
# accepted. Nothing of it was done; the collector holds a receipt the database no
# longer knows (``GET /v1/receipts/{id}`` answers 404) and must post the
# capture again (the same idempotency key names the same capture and job). One row
# per job id, counting how often it was met; ``error_code`` is a stable code
# (``JOB_GONE``), ``found_by`` says how (``message``: a message for it arrived;
# ``run``: the row went while a run had it in hand).
UNKNOWN_JOB_FOUND_BY = ("message", "run")
unknown_job_message = Table(
    "unknown_job_message",
    metadata,
    Column("job_id", Uuid, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("capture_id", Uuid, nullable=False),
    Column("kind", Text, nullable=False),
    Column("found_by", Text, nullable=False),
    Column("error_code", Text, nullable=False),
    Column("first_seen_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("last_seen_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("times_seen", Integer, nullable=False, server_default=text("1")),
    PrimaryKeyConstraint("job_id"),
    CheckConstraint(
        f"found_by IN ({', '.join(repr(s) for s in UNKNOWN_JOB_FOUND_BY)})",
        name="unknown_job_message_found_by_known",
    ),
    CheckConstraint("times_seen >= 1", name="unknown_job_message_seen_positive"),
)
