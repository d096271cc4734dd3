"""Resolver tables of classes, attribute definitions and attribute values (INV-07).

An attribute value must reference a published definition version whose applicability
includes the item's class, directly or through the class's ancestors. PostgreSQL
holds that in three layers (migration resolver_0005at):
- foreign keys: a value names an existing item and an existing (key, version); a
  class's parent is a registered class; every row names its decision (INV-05);
- immediate triggers: a published definition version, and its applicability, never
  change again (``attribute_definition_published_immutable``,
  ``attribute_applicability_frozen``), so nothing a value relied on can move;
- deferred constraint triggers, checked at COMMIT on the final state of the
  transaction: a written value, an item whose class changes, and a class whose
  parent changes (or that is deleted) are re-checked for the values they touch, and
  a violation raises SQLSTATE 23514 (check_violation) naming one of the constraints
  in ``VALUE_CONSTRAINTS``.
The domain service checks the same rules first, so the triggers only ever fire for a
writer that bypassed it.

Items' ``class_id`` stays plain text with no foreign key to ``catalog_class``: items
may carry classes nobody registered, and an unregistered class has no parents.
"""

from __future__ import annotations

from sqlalchemy import (
    CheckConstraint,
    Column,
    DateTime,
    ForeignKeyConstraint,
    Integer,
    PrimaryKeyConstraint,
    Table,
    Text,
    Uuid,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY

from db.tables.resolver import SCOPE, decision_fk, metadata

VALUE_TYPES = ("text", "number", "boolean", "enum")
DEFINITION_STATUSES = ("draft", "published")

KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$"
"""Attribute keys: no slash, so ``"<item_id>/<key>"`` and ``"<key>/<version>"`` split
unambiguously at their last slash."""

NOT_PUBLISHED = "attribute_value_published"
NOT_APPLICABLE = "attribute_value_applicable"
VALUE_INVALID = "attribute_value_fits_type"
VALUE_CONSTRAINTS = (NOT_PUBLISHED, NOT_APPLICABLE, VALUE_INVALID)
"""The constraint names the deferred INV-07 triggers raise with (SQLSTATE 23514)."""

DEFINITION_IMMUTABLE = "attribute_definition_published_immutable"
APPLICABILITY_FROZEN = "attribute_applicability_frozen"


# A class of a catalog, under an optional parent class. Definitions applying to a
# class apply to all its descendants. Rows are never updated: re-parenting is refused
# by the domain, and the deferred trigger re-checks values if a writer does it anyway.
catalog_class = Table(
    "catalog_class",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("class_id", Text, nullable=False),
    Column("parent_class_id", Text),
    Column("decision_id", Uuid, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint(*SCOPE, "class_id"),
    ForeignKeyConstraint(
        [*SCOPE, "parent_class_id"],
        ["catalog_class.tenant_id", "catalog_class.catalog_id", "catalog_class.class_id"],
        name="catalog_class_parent_fk",
    ),
    decision_fk("catalog_class_decision_fk"),
    CheckConstraint("class_id <> ''", name="catalog_class_id_nonempty"),
    CheckConstraint("parent_class_id <> class_id", name="catalog_class_not_own_parent"),
)

# One version of an attribute definition. A version is a row of its own; ``revision``
# counts the row's changes (defined, then published) and ``decision_id`` names the
# decision of the latest. Once published, the row never changes again.
attribute_definition = Table(
    "attribute_definition",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("attribute_key", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("label", Text, nullable=False),
    Column("value_type", Text, nullable=False),
    Column("allowed_values", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    Column("status", Text, nullable=False),
    Column("revision", Integer, nullable=False),
    Column("decision_id", Uuid, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint(*SCOPE, "attribute_key", "version"),
    decision_fk("attribute_definition_decision_fk"),
    CheckConstraint(f"attribute_key ~ '{KEY_PATTERN}'", name="attribute_definition_key_format"),
    CheckConstraint("version >= 1", name="attribute_definition_version_positive"),
    CheckConstraint("revision >= 1", name="attribute_definition_revision_positive"),
    CheckConstraint("label <> ''", name="attribute_definition_label_nonempty"),
    CheckConstraint(
        "value_type IN ('text', 'number', 'boolean', 'enum')",
        name="attribute_definition_type_known",
    ),
    CheckConstraint("status IN ('draft', 'published')", name="attribute_definition_status_known"),
    CheckConstraint(
        "(value_type = 'enum') = (cardinality(allowed_values) > 0)"
        " AND array_position(allowed_values, '') IS NULL"
        " AND array_position(allowed_values, NULL) IS NULL",
        name="attribute_definition_enum_values",
    ),
)

# The classes a definition version applies to (each with all its descendants).
attribute_applicability = Table(
    "attribute_applicability",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("attribute_key", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("class_id", Text, nullable=False),
    PrimaryKeyConstraint(*SCOPE, "attribute_key", "version", "class_id"),
    ForeignKeyConstraint(
        [*SCOPE, "attribute_key", "version"],
        [
            "attribute_definition.tenant_id",
            "attribute_definition.catalog_id",
            "attribute_definition.attribute_key",
            "attribute_definition.version",
        ],
        name="attribute_applicability_definition_fk",
    ),
    CheckConstraint("class_id <> ''", name="attribute_applicability_class_nonempty"),
)

# An item's current value of one attribute: one row per (item, key), moved by
# ``revision + 1`` on every write. ``item_revision`` is the item's active revision
# the value was accepted against (its event depends on it).
attribute_value = Table(
    "attribute_value",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("catalog_id", Text, nullable=False),
    Column("item_id", Text, nullable=False),
    Column("attribute_key", Text, nullable=False),
    Column("definition_version", Integer, nullable=False),
    Column("value", Text, nullable=False),
    Column("item_revision", Integer, nullable=False),
    Column("revision", Integer, nullable=False),
    Column("decision_id", Uuid, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint(*SCOPE, "item_id", "attribute_key"),
    ForeignKeyConstraint(
        [*SCOPE, "item_id"],
        ["catalog_item.tenant_id", "catalog_item.catalog_id", "catalog_item.item_id"],
        name="attribute_value_item_fk",
    ),
    ForeignKeyConstraint(
        [*SCOPE, "attribute_key", "definition_version"],
        [
            "attribute_definition.tenant_id",
            "attribute_definition.catalog_id",
            "attribute_definition.attribute_key",
            "attribute_definition.version",
        ],
        name="attribute_value_definition_fk",
    ),
    decision_fk("attribute_value_decision_fk"),
    CheckConstraint("value <> ''", name="attribute_value_nonempty"),
    CheckConstraint("revision >= 1", name="attribute_value_revision_positive"),
    CheckConstraint("item_revision >= 1", name="attribute_value_item_revision_positive"),
)
