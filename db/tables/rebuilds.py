"""Product table of shadow rebuilds: one row per rebuild request, its phase and what
each phase produced. Every phase change is one committed UPDATE of the row."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    PrimaryKeyConstraint,
    Table,
    Text,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from db.tables.product import metadata

PHASES = (
    "requested",
    "leased",
    "exporting",
    "loading",
    "catching_up",
    "cutting_over",
    "done",
    "failed",
    "cancelled",
)
FINAL_PHASES = ("done", "failed", "cancelled")

# ``rebuild_id`` is the request id of the control-topic message, so a request
# delivered twice is one row. ``shadow_consumer`` is the name the shadow's progress
# and dedupe are kept under; ``generation`` the projection generation it loads.
rebuild = Table(
    "rebuild",
    metadata,
    Column("rebuild_id", Uuid, nullable=False),
    Column("consumer", Text, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("history_epoch", BigInteger, nullable=False),
    Column("phase", Text, nullable=False, server_default=text("'requested'")),
    Column("attempt", Integer, nullable=False, server_default=text("1")),
    Column("shadow_consumer", Text, nullable=False),
    Column("generation", Integer),
    Column("lease_id", Uuid),
    Column("export_id", Uuid),
    Column("export_position", BigInteger),
    Column("target_position", BigInteger),
    Column("chunks_total", Integer, nullable=False, server_default=text("0")),
    Column("chunks_loaded", Integer, nullable=False, server_default=text("0")),
    Column("rows_loaded", BigInteger, nullable=False, server_default=text("0")),
    # The numbers of the chunks loaded so far, in the order they committed: a load
    # copies several at once, so they commit out of order (``chunks_loaded`` counts them).
    Column("loaded_chunks", ARRAY(Integer), nullable=False, server_default=text("'{}'::integer[]")),
    # Progress of the load: the export's records (once its manifest is read), its
    # count of each kind, and per kind the rows loaded so far with the seconds their
    # chunks took ({"catalog_item": {"rows": 250000, "seconds": 11.2}, ...}).
    Column("rows_total", BigInteger),
    Column("rows_by_kind", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("load_cost", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("requested_by", Text, nullable=False),
    Column("reason", Text, nullable=False, server_default=text("''")),
    Column("error_code", Text),
    Column("error_message", Text),
    # Catch-up and cutover: where the shadow's contiguous progress stands, the serving
    # generation the cutover retired (its rows are removed afterwards) and how long the
    # live applier of the stream was paused by the cutover transaction.
    Column("caught_up_position", BigInteger),
    Column("previous_generation", Integer),
    Column("cutover_pause_ms", Float),
    # Seconds spent in each phase so far ({"exporting": 1.2, ...}); the phase in
    # progress started at ``phase_started_at``.
    Column("timings", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("phase_started_at", DateTime(timezone=True)),
    # Set once a finished rebuild's shadow rows are removed and its lease released.
    Column("cleaned_at", DateTime(timezone=True)),
    # The worker carrying the rebuild out now: others leave it alone until the claim
    # expires (its worker died), then one of them takes it over.
    Column("claimed_by", Text),
    Column("claim_expires_at", DateTime(timezone=True)),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("finished_at", DateTime(timezone=True)),
    PrimaryKeyConstraint("rebuild_id"),
    CheckConstraint(
        "phase IN (" + ", ".join(f"'{p}'" for p in PHASES) + ")", name="rebuild_phase_known"
    ),
    CheckConstraint("attempt >= 1", name="rebuild_attempt_positive"),
    CheckConstraint("phase <> 'failed' OR error_code IS NOT NULL", name="rebuild_failed_has_code"),
    CheckConstraint("chunks_loaded <= chunks_total", name="rebuild_chunks_within_total"),
    CheckConstraint(
        "cardinality(loaded_chunks) = chunks_loaded", name="rebuild_loaded_chunks_counted"
    ),
)
# At most one unfinished rebuild per consumer and catalog: a second request while one
# runs is answered, not started.
Index(
    "rebuild_one_active_idx",
    rebuild.c.consumer,
    rebuild.c.tenant_id,
    rebuild.c.catalog_id,
    unique=True,
    postgresql_where=text("phase NOT IN ('done', 'failed', 'cancelled')"),
)

# The answer given to a REBUILD that was not started (``already_rebuilding``,
# ``refused``), kept so a redelivery of the same request id, however late, gets the
# same answer and never starts a rebuild the first delivery did not.
control_answer = Table(
    "control_answer",
    metadata,
    Column("command_id", Uuid, nullable=False),
    Column("status", Text, nullable=False),
    Column("message", Text, nullable=False),
    Column("running_rebuild_id", Uuid),
    Column("answered_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("command_id"),
    CheckConstraint("status IN ('already_rebuilding', 'refused')", name="control_answer_status"),
)
