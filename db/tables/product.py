"""Product database tables: projections (items, listing mappings, splits,
shipping-policy versions, attribute definitions and values, search documents), inbox,
parking, durable progress, quarantine."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Computed,
    DateTime,
    Index,
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
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR

metadata = MetaData()

# Durable contiguous progress per consumer and stream: every position <= ``position``
# has a terminal outcome in the inbox. ``generation`` is the projection generation this
# consumer serves, so a cutover can swap generation and cursor in one UPDATE.
stream_progress = Table(
    "stream_progress",
    metadata,
    Column("consumer", Text, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("history_epoch", BigInteger, nullable=False),
    Column("position", BigInteger, nullable=False, server_default=text("0")),
    Column("generation", Integer, nullable=False, server_default=text("1")),
    # Running counts of what this consumer did in the stream, for status and the demo.
    Column("applied_count", BigInteger, nullable=False, server_default=text("0")),
    Column("duplicate_count", BigInteger, nullable=False, server_default=text("0")),
    Column("parked_count", BigInteger, nullable=False, server_default=text("0")),
    Column("released_count", BigInteger, nullable=False, server_default=text("0")),
    Column("ignored_count", BigInteger, nullable=False, server_default=text("0")),
    # Positions a cutover moved this row past whose outcome is the rebuild's export
    # (the shadow loaded their effects, it never applied them one by one).
    Column("loaded_count", BigInteger, nullable=False, server_default=text("0")),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("consumer", "tenant_id", "catalog_id", "history_epoch"),
    CheckConstraint("position >= 0", name="stream_progress_position_nonnegative"),
)

# The product side's record of a fence (``db.resolver.fencing.settle_old_epochs``): from
# ``settled_at`` on, this database holds the catalog's epochs below ``epoch`` as
# history. It is no authority on epochs (the control database is one); it dates when
# the old epochs' rows began to be kept as history, so the inbox pruning keeps them
# for the fenced retention period and then deletes them (``db.product.inbox_pruning``), and
# the gap closer leaves those epochs alone. Rows are never removed.
superseded_epoch = Table(
    "superseded_epoch",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("settled_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("tenant_id", "catalog_id", "epoch"),
)

OUTCOMES = ("applied", "ignored_stale", "ignored_old_epoch", "skipped", "parked", "quarantined")
# ``skipped``: an operator skipped a quarantined event with an audited reason.
# ``quarantined``: the applier moved the event to quarantine itself (it waited on a
# skipped revision, or its release failed); like ``parked``, not terminal.
TERMINAL_OUTCOMES = ("applied", "ignored_stale", "ignored_old_epoch", "skipped")

# One row per consumer and event id it received: its dedupe key and the event's
# outcome for it. Keyed per consumer, so a shadow rebuild's consumer never takes the
# live consumer's events for duplicates, nor the other way round.
inbox = Table(
    "inbox",
    metadata,
    Column("consumer", Text, nullable=False, primary_key=True),
    Column("event_id", Uuid, nullable=False, primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("history_epoch", BigInteger, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("event_type", Text, nullable=False),
    Column("outcome", Text, nullable=False),
    Column("received_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("decided_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint(
        "outcome IN ('applied', 'ignored_stale', 'ignored_old_epoch', 'skipped', 'parked',"
        " 'quarantined')",
        name="inbox_outcome_known",
    ),
)
Index(
    "inbox_stream_position_idx",
    inbox.c.consumer,
    inbox.c.tenant_id,
    inbox.c.catalog_id,
    inbox.c.history_epoch,
    inbox.c.position,
)

# Events waiting for a dependency. The encoded message is kept so the event can be
# applied later, in the transaction that applies its dependency.
parked_event = Table(
    "parked_event",
    metadata,
    Column("consumer", Text, nullable=False, primary_key=True),
    Column("event_id", Uuid, nullable=False, primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("history_epoch", BigInteger, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("value", LargeBinary, nullable=False),
    Column("parked_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # Where the message came from, so a parked event that must be set aside (its
    # release fails, or what it waits on was skipped) is quarantined under its own
    # origin. Null for rows parked before migration product_0008pk.
    Column("topic", Text),
    Column("partition", Integer),
    Column("offset", BigInteger),
)

# What each parked event waits for: aggregate (type, id) at ``revision`` or later.
parked_dependency = Table(
    "parked_dependency",
    metadata,
    Column("consumer", Text, nullable=False),
    Column("event_id", Uuid, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("aggregate_type", Text, nullable=False),
    Column("aggregate_id", Text, nullable=False),
    Column("revision", BigInteger, nullable=False),
    PrimaryKeyConstraint("consumer", "event_id", "aggregate_type", "aggregate_id"),
)
Index(
    "parked_dependency_target_idx",
    parked_dependency.c.consumer,
    parked_dependency.c.tenant_id,
    parked_dependency.c.catalog_id,
    parked_dependency.c.aggregate_type,
    parked_dependency.c.aggregate_id,
)

# The catalog-item projection. ``generation`` lets a shadow rebuild load a new
# generation beside the serving one and cut over atomically.
product_item = Table(
    "product_item",
    metadata,
    Column("generation", Integer, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("item_id", Text, nullable=False),
    Column("class_id", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("title", Text, nullable=False),
    Column("parent_item_id", Text),
    Column("attributes", JSONB, nullable=False),
    Column("revision", BigInteger, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # The decision that made the row's state; null where it was applied from an event
    # written before schema release v3 (a rebuild fills it from the resolver's state).
    Column("decision_id", Uuid),
    PrimaryKeyConstraint("generation", "tenant_id", "catalog_id", "item_id"),
)

# The listing-mapping projection: the item each listing maps to, at the item revision
# the resolver saw active. One row per listing; ``revision`` is the mapping's own.
product_listing_mapping = Table(
    "product_listing_mapping",
    metadata,
    Column("generation", Integer, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("listing_id", Text, nullable=False),
    Column("item_id", Text, nullable=False),
    Column("item_revision", BigInteger, nullable=False),
    Column("decision_id", Uuid, nullable=False),
    Column("revision", BigInteger, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("generation", "tenant_id", "catalog_id", "listing_id"),
)

# "Which listings map to this item?" (the read API's item view).
Index(
    "product_listing_mapping_item_idx",
    product_listing_mapping.c.generation,
    product_listing_mapping.c.tenant_id,
    product_listing_mapping.c.catalog_id,
    product_listing_mapping.c.item_id,
)

# The split projection: an item split into successors (INV-08), and the listings the
# split moved to each. The source item's own row stays in ``product_item`` with status
# 'split' (its own event); this row names its successors. A split is one aggregate
# revision (``revision`` is always 1), and an item is split at most once.
product_item_split = Table(
    "product_item_split",
    metadata,
    Column("generation", Integer, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("split_id", Uuid, nullable=False),
    Column("source_item_id", Text, nullable=False),
    Column("source_revision", BigInteger, nullable=False),
    Column("successor_item_ids", ARRAY(Text), nullable=False),
    Column("remaps", JSONB, nullable=False),
    Column("decision_id", Uuid, nullable=False),
    Column("revision", BigInteger, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("generation", "tenant_id", "catalog_id", "split_id"),
)
# "Which split, if any, replaced this item?"
Index(
    "product_item_split_source_idx",
    product_item_split.c.generation,
    product_item_split.c.tenant_id,
    product_item_split.c.catalog_id,
    product_item_split.c.source_item_id,
)

# The shipping-policy projection: every version of every policy (a version is the
# policy's aggregate revision), each valid over [effective_from, effective_to). All
# versions are kept, not only the newest: versions in other scopes or windows stay
# in force. The resolver's exclusion constraint already keeps windows apart.
product_shipping_policy_version = Table(
    "product_shipping_policy_version",
    metadata,
    Column("generation", Integer, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("policy_id", Text, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("scope", Text, nullable=False),
    Column("effective_from", DateTime(timezone=True), nullable=False),
    Column("effective_to", DateTime(timezone=True)),
    Column("terms", JSONB, nullable=False),
    Column("decision_id", Uuid, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("generation", "tenant_id", "catalog_id", "policy_id", "version"),
)

# The attribute-definition projection: one row per definition version (the aggregate
# ``"<key>/<version>"``), with its type, enum values and the classes it applies to
# (each with its descendants), as JSON arrays. ``revision`` is the version's own.
product_attribute_definition = Table(
    "product_attribute_definition",
    metadata,
    Column("generation", Integer, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("attribute_key", Text, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("label", Text, nullable=False),
    Column("value_type", Text, nullable=False),
    Column("allowed_values", JSONB, nullable=False),
    Column("applies_to", JSONB, nullable=False),
    Column("status", Text, nullable=False),
    Column("decision_id", Uuid, nullable=False),
    Column("revision", BigInteger, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("generation", "tenant_id", "catalog_id", "attribute_key", "version"),
)

# The attribute-value projection: each item's current value of each attribute (the
# aggregate ``"<item_id>/<key>"``), as canonical text of ``value_type``. Its event
# waits (parked) for the item revision and the published definition it names, so the
# definition row for (attribute_key, definition_version) is always there to join.
product_attribute_value = Table(
    "product_attribute_value",
    metadata,
    Column("generation", Integer, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("item_id", Text, nullable=False),
    Column("attribute_key", Text, nullable=False),
    Column("definition_version", BigInteger, nullable=False),
    Column("value_type", Text, nullable=False),
    Column("value", Text, nullable=False),
    Column("item_revision", BigInteger, nullable=False),
    Column("decision_id", Uuid, nullable=False),
    Column("revision", BigInteger, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("generation", "tenant_id", "catalog_id", "item_id", "attribute_key"),
)

# The search-document projection: one row per item, derived from the item's row and
# its attribute values in the same generation (``processors.projections.
# search_documents`` says what text, and why). ``document`` is generated from the
# text columns, so it can never disagree with them; the GIN index serves ``@@``.
SEARCH_DOCUMENT = (
    "setweight(to_tsvector('simple'::regconfig, title), 'A')"
    " || setweight(to_tsvector('simple'::regconfig, attribute_text), 'B')"
)
product_search_document = Table(
    "product_search_document",
    metadata,
    Column("generation", Integer, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("item_id", Text, nullable=False),
    Column("title", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("attribute_text", Text, nullable=False),
    Column("document", TSVECTOR, Computed(SEARCH_DOCUMENT, persisted=True), nullable=False),
    # The item revision, and the greatest stream position among the rows, it was
    # built from.
    Column("item_revision", BigInteger, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("generation", "tenant_id", "catalog_id", "item_id"),
)
Index(
    "product_search_document_document_idx",
    product_search_document.c.document,
    postgresql_using="gin",
)

QUARANTINE_STATUSES = ("open", "retried", "skipped", "superseded")

# Messages that could not be decoded or applied: kept whole, with where they came from
# and why, until an operator retries or skips them.
quarantine = Table(
    "quarantine",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("consumer", Text, nullable=False),
    Column("topic", Text, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("key", LargeBinary),
    Column("value", LargeBinary),
    Column("event_id", Uuid),
    Column("tenant_id", Text),
    Column("catalog_id", Text),
    Column("history_epoch", BigInteger),
    Column("position", BigInteger),
    Column("error_code", Text, nullable=False),
    Column("error_detail", Text, nullable=False),
    Column("status", Text, nullable=False, server_default=text("'open'")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("resolved_at", DateTime(timezone=True)),
    Column("resolution", Text),
    # The aggregate revision of a skipped event (filled by the skip when the message
    # decodes): events that arrive later waiting on it are set aside, not parked.
    Column("aggregate_type", Text),
    Column("aggregate_id", Text),
    Column("revision", BigInteger),
    # ``superseded``: the same event was later applied from another copy (the
    # resolver's retained one, fetched by the gap closer).
    CheckConstraint(
        "status IN ('open', 'retried', 'skipped', 'superseded')", name="quarantine_status_known"
    ),
)
Index(
    "quarantine_message_idx",
    quarantine.c.consumer,
    quarantine.c.topic,
    quarantine.c.partition,
    quarantine.c.offset,
    unique=True,
)
# The applier's per-batch look for open entries of the events it just applied.
Index(
    "quarantine_open_event_idx",
    quarantine.c.consumer,
    quarantine.c.event_id,
    postgresql_where=text("status = 'open'"),
)
# "Was this dependency skipped?": the skipped revisions of each aggregate.
Index(
    "quarantine_skipped_aggregate_idx",
    quarantine.c.consumer,
    quarantine.c.tenant_id,
    quarantine.c.catalog_id,
    quarantine.c.aggregate_type,
    quarantine.c.aggregate_id,
    postgresql_where=text("status = 'skipped' AND aggregate_type IS NOT NULL"),
)
# The sweep of resolved entries past their retention, oldest first (``db.product.sweeps``).
Index(
    "quarantine_resolved_idx",
    quarantine.c.resolved_at,
    postgresql_where=text("status <> 'open'"),
)


# Where this consumer resumes reading each partition: every message below
# ``next_offset`` has been handled (applied, parked, duplicate or quarantined) in a
# committed product transaction. Kafka's own committed offsets are only a hint: a
# rebalance can acknowledge messages the agent never saw, so on every assignment the
# agent hands these offsets back to Kafka before it seeks.
consumer_offset = Table(
    "consumer_offset",
    metadata,
    Column("consumer", Text, nullable=False),
    Column("topic", Text, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("next_offset", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("consumer", "topic", "partition"),
)


# The last progress report the resolver refused for a stream, per consumer (the
# reporter's record, shown by ``gapless status``): the pass goes on past it, and the
# row goes once a report of the stream is acknowledged again.
report_refusal = Table(
    "report_refusal",
    metadata,
    Column("consumer", Text, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("history_epoch", BigInteger, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("code", Text, nullable=False),
    Column("message", Text, nullable=False),
    Column("refused_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("consumer", "tenant_id", "catalog_id", "history_epoch"),
)

DEFERRED_REASONS = ("paused", "epoch_held")

# Deliveries the live applier took in but did not apply yet, because the catalog was
# paused (``paused``) or their epoch is newer than the one its serving generation was
# cut over to (``epoch_held``). Their Kafka offsets are recorded, so Kafka will not
# deliver them again: each row is handed back (applied, or ignored as an old epoch
# with its audit row) once the pause or the hold ends, and then deleted.
deferred_delivery = Table(
    "deferred_delivery",
    metadata,
    Column("consumer", Text, nullable=False),
    Column("event_id", Uuid, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("history_epoch", BigInteger, nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("reason", Text, nullable=False),
    Column("value", LargeBinary, nullable=False),
    Column("deferred_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("consumer", "event_id"),
    CheckConstraint("reason IN ('paused', 'epoch_held')", name="deferred_delivery_reason_known"),
)
Index(
    "deferred_delivery_catalog_idx",
    deferred_delivery.c.consumer,
    deferred_delivery.c.tenant_id,
    deferred_delivery.c.catalog_id,
    deferred_delivery.c.history_epoch,
    deferred_delivery.c.position,
)
