"""classes, attribute definitions and attribute values (INV-07)

Adds ``catalog_class``, ``attribute_definition``, ``attribute_applicability`` and
``attribute_value`` (``db.tables.attributes``), the triggers that keep INV-07 true
whoever writes, and the application role's grants on the new tables (no DELETE on
any of them; classes and applicability are insert-only).

Triggers:
- ``attribute_definition_published_immutable`` (BEFORE UPDATE OR DELETE, immediate):
  a published definition version never changes again;
- ``attribute_applicability_frozen`` (BEFORE INSERT OR UPDATE OR DELETE, immediate):
  nor does the applicability of a published version;
- three deferred constraint triggers that run ``attribute_value_check`` at COMMIT on
  the values a transaction touched: ``attribute_value_inv07`` (a value written),
  ``catalog_item_class_inv07`` (an item's class changed), ``catalog_class_inv07``
  (a class re-parented, renamed or deleted). The check raises SQLSTATE 23514 with
  the constraint name ``attribute_value_published``, ``attribute_value_applicable`` or
  ``attribute_value_fits_type``.

The check share-locks the item and each class on its way up the lineage before
reading the next parent. Writers that skip the stream's cursor lock therefore still
serialize: a concurrent re-parent or class change either commits before the check
reads the row (and the check sees it), or waits for the value's transaction to commit
(and its own deferred check then sees the value).

Only new tables, functions and triggers; the one existing table that gains a trigger
is ``catalog_item``, whose trigger fires only when ``class_id`` changes. Branches from
resolver_0004d beside other features; ``db.migrate`` upgrades every head.

Revision ID: resolver_0005at
Revises: resolver_0004d
Create Date: 2026-12-01 09:00:00.000000

"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision: str = "resolver_0005at"
down_revision: str | Sequence[str] | None = "resolver_0004d"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = "gapless_resolver_app"
_SCOPE = ["tenant_id", "catalog_id"]
KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$"

_VALUE_FITS = r"""
CREATE FUNCTION attribute_value_fits(value_type text, allowed_values text[], value text)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE value_type
    WHEN 'text' THEN value <> ''
    WHEN 'number' THEN value ~ '^(0|-?(0\.[0-9]*[1-9]|[1-9][0-9]*(\.[0-9]*[1-9])?))$'
    WHEN 'boolean' THEN value IN ('true', 'false')
    WHEN 'enum' THEN value = ANY (allowed_values)
    ELSE false
  END
$$
"""

_VALUE_CHECK = """
CREATE FUNCTION attribute_value_check(
  p_tenant text, p_catalog text, p_item text, p_key text
) RETURNS void LANGUAGE plpgsql
-- Runs as the tables' owner: the row locks it takes (FOR SHARE) need UPDATE rights
-- the writer may not have (the application role cannot update classes). The
-- search_path is pinned to the one the migration ran with.
SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  v attribute_value%ROWTYPE;
  d attribute_definition%ROWTYPE;
  lineage text[] := '{}';
  current_class text;
  parent text;
  subject text;
BEGIN
  SELECT * INTO v FROM attribute_value
   WHERE tenant_id = p_tenant AND catalog_id = p_catalog AND item_id = p_item
     AND attribute_key = p_key;
  IF NOT FOUND THEN
    RETURN;  -- not there (any more): nothing to check
  END IF;
  subject := 'attribute ' || p_key || ' of item ' || p_item || ' in ' || p_tenant || '/'
    || p_catalog || ' (definition version ' || v.definition_version || ')';

  SELECT * INTO d FROM attribute_definition
   WHERE tenant_id = p_tenant AND catalog_id = p_catalog AND attribute_key = p_key
     AND version = v.definition_version
   FOR SHARE;
  IF d.status IS DISTINCT FROM 'published' THEN
    RAISE EXCEPTION USING ERRCODE = 'check_violation',
      CONSTRAINT = 'attribute_value_published', TABLE = 'attribute_value',
      MESSAGE = 'INV-07: ' || subject || ': the definition version is '
        || coalesce(d.status, 'missing') || ', not published';
  END IF;

  -- Walk up from the item's class, share-locking each row before following its
  -- parent, so no concurrent writer can change the path until this one commits.
  SELECT class_id INTO current_class FROM catalog_item
   WHERE tenant_id = p_tenant AND catalog_id = p_catalog AND item_id = p_item
   FOR SHARE;
  WHILE current_class IS NOT NULL AND NOT current_class = ANY (lineage) LOOP
    lineage := lineage || current_class;
    parent := NULL;
    SELECT parent_class_id INTO parent FROM catalog_class
     WHERE tenant_id = p_tenant AND catalog_id = p_catalog AND class_id = current_class
     FOR SHARE;
    current_class := parent;
  END LOOP;
  IF NOT EXISTS (
    SELECT 1 FROM attribute_applicability
     WHERE tenant_id = p_tenant AND catalog_id = p_catalog AND attribute_key = p_key
       AND version = v.definition_version AND class_id = ANY (lineage)
  ) THEN
    RAISE EXCEPTION USING ERRCODE = 'check_violation',
      CONSTRAINT = 'attribute_value_applicable', TABLE = 'attribute_value',
      MESSAGE = 'INV-07: ' || subject || ': the version applies to none of the classes '
        || array_to_string(lineage, ' < ');
  END IF;

  IF NOT attribute_value_fits(d.value_type, d.allowed_values, v.value) THEN
    RAISE EXCEPTION USING ERRCODE = 'check_violation',
      CONSTRAINT = 'attribute_value_fits_type', TABLE = 'attribute_value',
      MESSAGE = 'INV-07: ' || subject || ': ' || quote_literal(v.value)
        || ' is not a canonical ' || d.value_type || ' value of the definition';
  END IF;
END
$$
"""

_VALUE_TRIGGER = """
CREATE FUNCTION attribute_value_inv07() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM attribute_value_check(NEW.tenant_id, NEW.catalog_id, NEW.item_id, NEW.attribute_key);
  RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER attribute_value_inv07
  AFTER INSERT OR UPDATE ON attribute_value
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION attribute_value_inv07()
"""

_ITEM_TRIGGER = """
CREATE FUNCTION catalog_item_class_inv07() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM attribute_value_check(v.tenant_id, v.catalog_id, v.item_id, v.attribute_key)
     FROM attribute_value v
    WHERE v.tenant_id = NEW.tenant_id AND v.catalog_id = NEW.catalog_id
      AND v.item_id = NEW.item_id;
  RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER catalog_item_class_inv07
  AFTER UPDATE OF class_id ON catalog_item
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW WHEN (OLD.class_id IS DISTINCT FROM NEW.class_id)
  EXECUTE FUNCTION catalog_item_class_inv07()
"""

# The values of every item whose class is the changed class or one of its
# descendants. A scan of the catalog's items: classes change only by a writer that
# bypassed the domain (which refuses it), so this is never on a hot path.
_CLASS_TRIGGER = """
CREATE FUNCTION catalog_class_inv07() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM attribute_value_check(v.tenant_id, v.catalog_id, v.item_id, v.attribute_key)
     FROM attribute_value v
     JOIN catalog_item i ON i.tenant_id = v.tenant_id AND i.catalog_id = v.catalog_id
      AND i.item_id = v.item_id
    WHERE v.tenant_id = OLD.tenant_id AND v.catalog_id = OLD.catalog_id
      AND i.class_id IN (
        WITH RECURSIVE subtree(class_id) AS (
          SELECT OLD.class_id
          UNION
          SELECT c.class_id FROM catalog_class c JOIN subtree s ON c.parent_class_id = s.class_id
           WHERE c.tenant_id = OLD.tenant_id AND c.catalog_id = OLD.catalog_id
        )
        SELECT class_id FROM subtree
      );
  RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER catalog_class_inv07
  AFTER UPDATE OR DELETE ON catalog_class
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION catalog_class_inv07()
"""

_DEFINITION_IMMUTABLE = """
CREATE FUNCTION attribute_definition_published_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.status = 'published' THEN
    RAISE EXCEPTION USING ERRCODE = 'check_violation',
      CONSTRAINT = 'attribute_definition_published_immutable',
      TABLE = 'attribute_definition',
      MESSAGE = 'attribute ' || OLD.attribute_key || ' version ' || OLD.version || ' of '
        || OLD.tenant_id || '/' || OLD.catalog_id
        || ' is published: define a new version instead';
  END IF;
  RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END
$$;
CREATE TRIGGER attribute_definition_published_immutable
  BEFORE UPDATE OR DELETE ON attribute_definition
  FOR EACH ROW EXECUTE FUNCTION attribute_definition_published_immutable()
"""

_APPLICABILITY_FROZEN = """
CREATE FUNCTION attribute_applicability_frozen() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  r attribute_applicability%ROWTYPE;
BEGIN
  FOREACH r IN ARRAY ARRAY[OLD, NEW] LOOP
    IF r.attribute_key IS NOT NULL AND EXISTS (
      SELECT 1 FROM attribute_definition d
       WHERE d.tenant_id = r.tenant_id AND d.catalog_id = r.catalog_id
         AND d.attribute_key = r.attribute_key AND d.version = r.version
         AND d.status = 'published'
    ) THEN
      RAISE EXCEPTION USING ERRCODE = 'check_violation',
        CONSTRAINT = 'attribute_applicability_frozen', TABLE = 'attribute_applicability',
        MESSAGE = 'attribute ' || r.attribute_key || ' version ' || r.version
          || ' is published: its applicability cannot change';
    END IF;
  END LOOP;
  RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END
$$;
CREATE TRIGGER attribute_applicability_frozen
  BEFORE INSERT OR UPDATE OR DELETE ON attribute_applicability
  FOR EACH ROW EXECUTE FUNCTION attribute_applicability_frozen()
"""

_FUNCTIONS = (
    "attribute_applicability_frozen()",
    "attribute_definition_published_immutable()",
    "catalog_class_inv07()",
    "catalog_item_class_inv07()",
    "attribute_value_inv07()",
    "attribute_value_check(text, text, text, text)",
    "attribute_value_fits(text, text[], text)",
)


def _now(name: str) -> sa.Column[Any]:
    return sa.Column(
        name, sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
    )


def _decision_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [*_SCOPE, "decision_id"],
        ["decision.tenant_id", "decision.catalog_id", "decision.decision_id"],
        name=f"{table}_decision_fk",
    )


def _definition_fk(table: str, version_column: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [*_SCOPE, "attribute_key", version_column],
        [
            "attribute_definition.tenant_id",
            "attribute_definition.catalog_id",
            "attribute_definition.attribute_key",
            "attribute_definition.version",
        ],
        name=f"{table}_definition_fk",
    )


def upgrade() -> None:
    """Upgrade schema: tables, functions and triggers, grants (one transaction)."""
    op.create_table(
        "catalog_class",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("class_id", sa.Text(), nullable=False),
        sa.Column("parent_class_id", sa.Text(), nullable=True),
        sa.Column("decision_id", sa.Uuid(), nullable=False),
        _now("created_at"),
        sa.CheckConstraint("class_id <> ''", name="catalog_class_id_nonempty"),
        sa.CheckConstraint("parent_class_id <> class_id", name="catalog_class_not_own_parent"),
        sa.ForeignKeyConstraint(
            [*_SCOPE, "parent_class_id"],
            ["catalog_class.tenant_id", "catalog_class.catalog_id", "catalog_class.class_id"],
            name="catalog_class_parent_fk",
        ),
        _decision_fk("catalog_class"),
        sa.PrimaryKeyConstraint(*_SCOPE, "class_id"),
    )
    op.create_table(
        "attribute_definition",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("attribute_key", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("label", sa.Text(), nullable=False),
        sa.Column("value_type", sa.Text(), nullable=False),
        sa.Column(
            "allowed_values",
            postgresql.ARRAY(sa.Text()),
            server_default=sa.text("'{}'::text[]"),
            nullable=False,
        ),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("decision_id", sa.Uuid(), nullable=False),
        _now("created_at"),
        _now("updated_at"),
        sa.CheckConstraint(
            f"attribute_key ~ '{KEY_PATTERN}'", name="attribute_definition_key_format"
        ),
        sa.CheckConstraint("version >= 1", name="attribute_definition_version_positive"),
        sa.CheckConstraint("revision >= 1", name="attribute_definition_revision_positive"),
        sa.CheckConstraint("label <> ''", name="attribute_definition_label_nonempty"),
        sa.CheckConstraint(
            "value_type IN ('text', 'number', 'boolean', 'enum')",
            name="attribute_definition_type_known",
        ),
        sa.CheckConstraint(
            "status IN ('draft', 'published')", name="attribute_definition_status_known"
        ),
        sa.CheckConstraint(
            "(value_type = 'enum') = (cardinality(allowed_values) > 0)"
            " AND array_position(allowed_values, '') IS NULL"
            " AND array_position(allowed_values, NULL) IS NULL",
            name="attribute_definition_enum_values",
        ),
        _decision_fk("attribute_definition"),
        sa.PrimaryKeyConstraint(*_SCOPE, "attribute_key", "version"),
    )
    op.create_table(
        "attribute_applicability",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("attribute_key", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("class_id", sa.Text(), nullable=False),
        sa.CheckConstraint("class_id <> ''", name="attribute_applicability_class_nonempty"),
        _definition_fk("attribute_applicability", "version"),
        sa.PrimaryKeyConstraint(*_SCOPE, "attribute_key", "version", "class_id"),
    )
    op.create_table(
        "attribute_value",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("item_id", sa.Text(), nullable=False),
        sa.Column("attribute_key", sa.Text(), nullable=False),
        sa.Column("definition_version", sa.Integer(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("item_revision", sa.Integer(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("decision_id", sa.Uuid(), nullable=False),
        _now("updated_at"),
        sa.CheckConstraint("value <> ''", name="attribute_value_nonempty"),
        sa.CheckConstraint("revision >= 1", name="attribute_value_revision_positive"),
        sa.CheckConstraint("item_revision >= 1", name="attribute_value_item_revision_positive"),
        sa.ForeignKeyConstraint(
            [*_SCOPE, "item_id"],
            ["catalog_item.tenant_id", "catalog_item.catalog_id", "catalog_item.item_id"],
            name="attribute_value_item_fk",
        ),
        _definition_fk("attribute_value", "definition_version"),
        _decision_fk("attribute_value"),
        sa.PrimaryKeyConstraint(*_SCOPE, "item_id", "attribute_key"),
    )
    for statement in (
        _VALUE_FITS,
        _VALUE_CHECK,
        _VALUE_TRIGGER,
        _ITEM_TRIGGER,
        _CLASS_TRIGGER,
        _DEFINITION_IMMUTABLE,
        _APPLICABILITY_FROZEN,
    ):
        op.execute(statement)
    op.execute(f"GRANT SELECT, INSERT ON catalog_class, attribute_applicability TO {APP_ROLE}")
    op.execute(
        f"GRANT SELECT, INSERT, UPDATE ON attribute_definition, attribute_value TO {APP_ROLE}"
    )


def downgrade() -> None:
    """Downgrade schema: grants, triggers and functions, then the tables."""
    op.execute(
        "REVOKE ALL ON catalog_class, attribute_definition, attribute_applicability,"
        f" attribute_value FROM {APP_ROLE}"
    )
    op.execute("DROP TRIGGER catalog_item_class_inv07 ON catalog_item")
    op.drop_table("attribute_value")
    op.drop_table("attribute_applicability")
    op.drop_table("attribute_definition")
    op.drop_table("catalog_class")
    for function in _FUNCTIONS:
        op.execute(f"DROP FUNCTION {function}")
