"""Resolver tables of the capture worker: where a source's captures go, what became of
every extracted product and the claims it made, the newest result per source item, the
job checkpoints and the operators' repairs.

They live on the resolver metadata, so the resolver migrations create them. Each
stable identity is a unique constraint that leads with the tenant; the worker's claim
on a job lives on ``intake_job`` (``db.tables.intake``).
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
    Integer,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

from db.tables.resolver import metadata

ITEM_OUTCOMES = (
    "applied",  # a decision accepted the product's facts
    "unchanged",  # the catalog already said exactly this: nothing to decide
    "superseded",  # newer work on the same source item was applied first
    "review",  # identity could not be settled automatically: a review case is open
    "rejected",  # refused on purpose (by the adapter or a domain rule), with a code
    "retryable",  # failed; retried at ``next_attempt_at`` while the budget lasts
    "failed",  # the retry budget ran out: waits for an operator (retry or skip)
    "skipped",  # an operator gave it up, with a reason
)
TERMINAL_OUTCOMES = ("applied", "unchanged", "superseded", "review", "rejected", "skipped")
"""Outcomes nothing will ever change again; ``retryable`` and ``failed`` still wait."""

_RESULT = ("tenant_id", "capture_id", "source_item_id", "parser_version")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


# Where the captures of one (tenant, source) go: the catalog their products resolve
# into and the adapter that parses them. Registered by an operator; a capture whose
# source has none is refused, visibly, until one is registered and the job retried.
source_binding = Table(
    "source_binding",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("adapter", Text, nullable=False),
    Column("registered_by", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("tenant_id", "source"),
    CheckConstraint("catalog_id <> '' AND adapter <> ''", name="source_binding_named"),
)

# One result: what one parser version made of one source item in one capture. The
# key is the result's identity (content fingerprint and schema version are fixed by
# the capture and the parser); a redelivered job finds its row and does nothing.
# ``id`` is a handle for operators only, never an ordering.
capture_item = Table(
    "capture_item",
    metadata,
    Column("id", BigInteger, Identity(always=True), nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("capture_id", Uuid, nullable=False),
    Column("source_item_id", Text, nullable=False),
    Column("parser_version", Integer, nullable=False),
    Column("job_id", Uuid, nullable=False),
    Column("source", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("adapter", Text, nullable=False),
    Column("item_index", Integer),  # place in the extraction; NULL: refused by the adapter
    Column("schema_version", Integer, nullable=False),
    Column("fingerprint", Text, nullable=False),
    Column("locator", Text, nullable=False),
    Column("outcome", Text, nullable=False),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("next_attempt_at", DateTime(timezone=True)),
    # Why the result is not applied: a failure's or refusal's code, or a review reason.
    Column("error_code", Text),
    Column("last_error", Text),  # sanitized: no credentials, bounded length
    Column("item_id", Text),  # the catalog item the product resolved to
    Column("decision_id", Uuid),
    Column("case_id", Text),
    # The claims the result makes, written with its terminal outcome: each field the
    # adapter read, its value and where on the captured page it stands, as
    # {field: [value, locator]}. NULL: no claims (a failure, a refusal, unsettled).
    Column("claims", JSONB),
    Column("resolved_by", Text),  # the operator of a skip
    Column("resolution_reason", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint(*_RESULT),
    UniqueConstraint("id", name="capture_item_id_key"),
    ForeignKeyConstraint(
        ["tenant_id", "capture_id"],
        ["capture.tenant_id", "capture.capture_id"],
        name="capture_item_capture_fk",
    ),
    ForeignKeyConstraint(["job_id"], ["intake_job.job_id"], name="capture_item_job_fk"),
    CheckConstraint(_in("outcome", ITEM_OUTCOMES), name="capture_item_outcome_known"),
    CheckConstraint("attempts >= 0", name="capture_item_attempts_nonnegative"),
    CheckConstraint(
        "outcome <> 'retryable' OR next_attempt_at IS NOT NULL",
        name="capture_item_retry_scheduled",
    ),
    CheckConstraint(
        "outcome NOT IN ('rejected', 'retryable', 'failed') OR error_code IS NOT NULL",
        name="capture_item_failure_classified",
    ),
    CheckConstraint(
        "outcome <> 'skipped' OR (resolved_by IS NOT NULL AND resolution_reason <> '')",
        name="capture_item_skip_audited",
    ),
)
# A job's items (its outcome summary) and the operators' list of open failures.
Index("capture_item_job_idx", capture_item.c.job_id, capture_item.c.item_index)
Index(
    "capture_item_open_idx",
    capture_item.c.tenant_id,
    capture_item.c.id,
    postgresql_where=text("outcome IN ('retryable', 'failed')"),
)

# The newest result applied for a source item: stale-work protection. A result only
# replaces it when its version, (captured_at, capture arrival, capture id, parser
# version) in that order, is not older; so a late worker finishing an older capture,
# or an older parser's run of the same capture, cannot overwrite newer state.
source_item_state = Table(
    "source_item_state",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("source_item_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("captured_at", DateTime(timezone=True), nullable=False),
    Column("capture_created_at", DateTime(timezone=True), nullable=False),
    Column("capture_id", Uuid, nullable=False),
    Column("parser_version", Integer, nullable=False),
    Column("schema_version", Integer, nullable=False),
    Column("fingerprint", Text, nullable=False),
    Column("item_id", Text, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("tenant_id", "source", "source_item_id"),
)

# How far a job's run over one extraction got: every product before ``next_item``
# has a terminal outcome or a durable retry record. Only
# ``db.repositories.capture_checkpoints`` writes these rows (a test holds every other
# module to that), always by compare-and-set against the value its run loaded.
capture_checkpoint = Table(
    "capture_checkpoint",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("job_id", Uuid, nullable=False),
    Column("parser_version", Integer, nullable=False),
    Column("next_item", Integer, nullable=False),
    Column("items", Integer, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("tenant_id", "job_id", "parser_version"),
    ForeignKeyConstraint(["job_id"], ["intake_job.job_id"], name="capture_checkpoint_job_fk"),
    CheckConstraint("next_item >= 0 AND next_item <= items", name="capture_checkpoint_in_range"),
)

# Every operator repair of a job or of one of its items (a retry, a skip, or a
# replay of the capture under the current parser): who, what, why, when.
capture_repair = Table(
    "capture_repair",
    metadata,
    Column("id", BigInteger, Identity(always=True), nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("job_id", Uuid, nullable=False),
    Column("capture_item_id", BigInteger),  # NULL: the job itself
    Column("action", Text, nullable=False),
    Column("actor", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("id"),
    ForeignKeyConstraint(["job_id"], ["intake_job.job_id"], name="capture_repair_job_fk"),
    ForeignKeyConstraint(
        ["capture_item_id"], ["capture_item.id"], name="capture_repair_capture_item_fk"
    ),
    CheckConstraint("action IN ('retry', 'skip', 'replay')", name="capture_repair_action_known"),
    CheckConstraint("action <> 'skip' OR reason <> ''", name="capture_repair_skip_reason"),
)
# The evidence sweep deletes a job's repairs with the job.
Index("capture_repair_job_idx", capture_repair.c.job_id)

# The identity generation each class of a capture's products is resolved in: the one
# active when the capture arrived, recorded the first time a product of that class is
# resolved and read on every later attempt and replay. Recomputing it from the
# arrival time is not enough: an activation stamps its time while its transaction
# runs, so a capture arriving just before that commit could read the older
# generation first and the newer one later. NULL: the class had none.
capture_identity_pin = Table(
    "capture_identity_pin",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("capture_id", Uuid, nullable=False),
    Column("class_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("identity_generation", Integer),
    Column("pinned_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("tenant_id", "capture_id", "class_id"),
    ForeignKeyConstraint(
        ["tenant_id", "capture_id"],
        ["capture.tenant_id", "capture.capture_id"],
        name="capture_identity_pin_capture_fk",
    ),
    CheckConstraint(
        "identity_generation IS NULL OR identity_generation >= 1",
        name="capture_identity_pin_generation_positive",
    ),
)
