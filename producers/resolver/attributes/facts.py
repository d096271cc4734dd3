"""The attribute facts a decision accepts (INV-07): classes, attribute definitions
and attribute values.

An attribute value references a published definition version whose applicability
includes the item's class, directly or through the class's ancestors. The facts here
check that before they write; PostgreSQL checks it again at COMMIT (deferred
constraint triggers, ``db.tables.attributes``) for whatever bypassed them.

What could take a value out of its definition's reach later, and how it is refused:
- a published definition version, or its applicability, changing: never offered by
  the domain (a change is a new version); PostgreSQL refuses it immediately;
- a class moving under another parent: ``DefineClass`` refuses to redefine a class;
  the deferred trigger re-checks the values of the class's whole subtree;
- an item changing class: ``refuse_class_change`` (run by the item fact) refuses it
  when a current value would no longer apply; the deferred trigger re-checks the
  item's values, also for writers that call ``record_item`` directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg.errors

from db.repositories import attributes as rows
from db.repositories import catalog_items as items
from db.repositories.attributes import DefinitionRow, ValueWrite
from db.repositories.catalog_items import ItemRow
from db.stream_writer import PendingEvent
from db.tables.attributes import VALUE_TYPES
from db.unit_of_work import Transaction, UnitOfWork
from producers.resolver.attributes.rules import (
    KEY,
    MAX_ID,
    MAX_LABEL,
    MAX_VERSION,
    RawValue,
    applies,
    canonical_value,
    check_reference,
    check_text,
)
from producers.resolver.exceptions import (
    AttributeAlreadyPublished,
    AttributeDefinitionInvalid,
    AttributeNotApplicable,
    AttributeNotFound,
    AttributeNotPublished,
    AttributeVersionExists,
    ClassAlreadyDefined,
    ClassReparentRefused,
    InvalidClass,
    ItemNotActive,
    ItemNotFound,
    ParentClassNotFound,
)
from producers.resolver.facts import DecisionScope, Footprint
from schemas.events import AggregateRef, AttributeDefined, AttributeValueSet, CatalogClassDefined
from schemas.ids import definition_id, value_id

CLASS = "catalog_class"
DEFINITION = "attribute_definition"
VALUE = "attribute_value"
ITEM = "catalog_item"


@dataclass(frozen=True, slots=True)
class DefineClass:
    """Register ``class_id`` in the catalog, under ``parent_class_id`` (a registered
    class) or as a root. A class is defined once and never moves."""

    class_id: str
    parent_class_id: str | None = None

    def __post_init__(self) -> None:
        check_text(self.class_id, "a class id", MAX_ID, InvalidClass)
        if self.parent_class_id is not None:
            check_text(self.parent_class_id, "a parent class id", MAX_ID, InvalidClass)
        if self.parent_class_id == self.class_id:
            raise InvalidClass(f"class {self.class_id!r} cannot be its own parent")

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        define_class(uow, scope, self)


@dataclass(frozen=True, slots=True)
class DefineAttribute:
    """Define ``version`` of the attribute ``attribute_key``: its label, its type
    (``text``, ``number``, ``boolean``, or ``enum`` with ``allowed_values``) and the
    classes it applies to (each with its descendants). ``publish`` defines it
    published at once; otherwise it is a draft until ``PublishAttribute``."""

    attribute_key: str
    version: int
    label: str
    value_type: str
    applies_to: tuple[str, ...]
    allowed_values: tuple[str, ...] = ()
    publish: bool = False

    def __post_init__(self) -> None:
        bad = AttributeDefinitionInvalid
        if not KEY.fullmatch(self.attribute_key):
            raise bad(
                f"attribute key {self.attribute_key!r} must be 1-100 letters, digits or"
                " '_.:-', starting with a letter or digit"
            )
        if not 1 <= self.version <= MAX_VERSION:
            raise bad(f"version {self.version} is not between 1 and {MAX_VERSION}")
        check_text(self.label, "a label", MAX_LABEL, bad)
        if self.value_type not in VALUE_TYPES:
            raise bad(f"value type {self.value_type!r} is not one of {VALUE_TYPES}")
        if (self.value_type == "enum") != bool(self.allowed_values):
            raise bad("an enum lists its allowed values; other types list none")
        for allowed in self.allowed_values:
            check_text(allowed, "an allowed value", MAX_ID, bad)
        if len(set(self.allowed_values)) != len(self.allowed_values):
            raise bad("allowed values must be distinct")
        if not self.applies_to:
            raise bad(f"attribute {self.attribute_key!r} applies to no class")
        for class_id in self.applies_to:
            check_text(class_id, "a class id", MAX_ID, bad)
        if len(set(self.applies_to)) != len(self.applies_to):
            raise bad("the classes it applies to must be distinct")

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        define_attribute(uow, scope, self)


@dataclass(frozen=True, slots=True)
class PublishAttribute:
    """Publish a draft definition version; from then on it never changes."""

    attribute_key: str
    version: int

    def __post_init__(self) -> None:
        check_reference(self.attribute_key, self.version)

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        publish_attribute(uow, scope, self)


@dataclass(frozen=True, slots=True)
class SetAttributeValue:
    """Set item ``item_id``'s value of ``attribute_key`` under definition ``version``."""

    item_id: str
    attribute_key: str
    version: int
    value: RawValue

    def __post_init__(self) -> None:
        check_reference(self.attribute_key, self.version)
        # No stored item has such an id (PostgreSQL text cannot even hold a NUL).
        if not self.item_id or "\x00" in self.item_id or len(self.item_id) > MAX_ID:
            raise ItemNotFound(f"no item can have the id {self.item_id!r}")

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        set_attribute_values(uow, scope, [self])

    def footprint(self) -> Footprint:
        return Footprint(
            frozenset({(VALUE, value_id(self.item_id, self.attribute_key))}),
            frozenset(
                {
                    (ITEM, self.item_id),
                    (DEFINITION, definition_id(self.attribute_key, self.version)),
                }
            ),
        )

    @classmethod
    def accept_all(
        cls, uow: UnitOfWork, scope: DecisionScope, facts: Sequence[SetAttributeValue]
    ) -> None:
        set_attribute_values(uow, scope, facts)


# --- the write path (parts of ``record_decision``) -------------------------------------


def define_class(uow: UnitOfWork, scope: DecisionScope, fact: DefineClass) -> None:
    """Register the class and queue its event.

    1. lock the stream's cursor: it serializes every writer of this catalog's
       classes, so the existence checks below stay true until COMMIT;
    2. refuse a class that exists (with another parent: a re-parent) and a parent
       that does not;
    3. insert the class (the primary key and the parent's foreign key would refuse
       what step 2 let through) and queue its event.
    """
    writer = uow.stream(scope.tenant_id, scope.catalog_id)
    tx = uow.tx
    where = f"{scope.tenant_id}/{scope.catalog_id}"
    existing = rows.get_class(tx, scope.tenant_id, scope.catalog_id, fact.class_id)
    if existing is not None:
        if existing.parent_class_id != fact.parent_class_id:
            raise ClassReparentRefused(
                f"class {fact.class_id!r} of {where} is under {existing.parent_class_id!r};"
                " classes never move (the values of their items rely on their lineage)"
            )
        raise ClassAlreadyDefined(f"class {fact.class_id!r} of {where} is already defined")
    if (
        fact.parent_class_id is not None
        and rows.get_class(tx, scope.tenant_id, scope.catalog_id, fact.parent_class_id) is None
    ):
        raise ParentClassNotFound(f"no class {fact.parent_class_id!r} in {where}")
    t, c = scope.tenant_id, scope.catalog_id
    rows.insert_class(tx, t, c, fact.class_id, fact.parent_class_id, scope.decision_id)
    writer.append(
        PendingEvent(
            aggregate=AggregateRef(type=CLASS, id=fact.class_id, revision=1),
            payload=CatalogClassDefined(
                parent_class_id=fact.parent_class_id, decision_id=scope.decision_id
            ),
        )
    )


def define_attribute(uow: UnitOfWork, scope: DecisionScope, fact: DefineAttribute) -> None:
    """Insert the definition version (revision 1) and queue its event.

    1. lock the stream's cursor: no other domain writer can define the same version
       meanwhile (the primary key refuses one that skipped the lock);
    2. insert the version and its applicability (``insert_definition``);
    3. read the stored row back and queue its event, so the event says exactly what
       was stored.
    """
    writer = uow.stream(scope.tenant_id, scope.catalog_id)
    try:
        rows.insert_definition(
            uow.tx,
            scope.tenant_id,
            scope.catalog_id,
            fact.attribute_key,
            fact.version,
            fact.label,
            fact.value_type,
            fact.allowed_values,
            fact.applies_to,
            fact.publish,
            scope.decision_id,
        )
    except psycopg.errors.UniqueViolation as exc:
        raise AttributeVersionExists(
            f"attribute {fact.attribute_key!r} version {fact.version} already exists in"
            f" {scope.tenant_id}/{scope.catalog_id}; define a new version"
        ) from exc
    stored = rows.get_definition(
        uow.tx, scope.tenant_id, scope.catalog_id, fact.attribute_key, fact.version
    )
    assert stored is not None  # inserted just above, in this transaction
    writer.append(_defined_event(stored))


def publish_attribute(uow: UnitOfWork, scope: DecisionScope, fact: PublishAttribute) -> int:
    """Publish the draft with ``revision + 1`` and queue its event; returns the revision.

    The UPDATE only matches a draft, so two publishers cannot both succeed; when it
    matches nothing, the row (read after) says why.
    """
    writer = uow.stream(scope.tenant_id, scope.catalog_id)
    tx = uow.tx
    revision = rows.publish_definition(
        tx, scope.tenant_id, scope.catalog_id, fact.attribute_key, fact.version, scope.decision_id
    )
    definition = rows.get_definition(
        tx, scope.tenant_id, scope.catalog_id, fact.attribute_key, fact.version
    )
    name = f"attribute {fact.attribute_key!r} version {fact.version}"
    if definition is None:
        raise AttributeNotFound(f"no {name} in {scope.tenant_id}/{scope.catalog_id}")
    if revision is None:
        raise AttributeAlreadyPublished(f"{name} is already published")
    writer.append(_defined_event(definition))
    return revision


def set_attribute_value(uow: UnitOfWork, scope: DecisionScope, fact: SetAttributeValue) -> int:
    """Write one item's value of one key (``set_attribute_values``); returns its revision."""
    return set_attribute_values(uow, scope, [fact])[0]


def set_attribute_values(
    uow: UnitOfWork, scope: DecisionScope, facts: Sequence[SetAttributeValue]
) -> list[int]:
    """Write each item's value of its key with ``revision + 1`` (distinct (item, key)
    pairs); returns the revisions in order. One statement per step for all the facts,
    the lineage once per class met.

    1. lock the stream's cursor (before reading anything exported);
    2. share-lock the definition versions named (in key order); a published version
       never changes, so its type and applicability hold from here on;
    3. share-lock the items (in key order): FOR SHARE conflicts with any writer's
       UPDATE of the row, so an item can neither leave 'active' nor change class until
       this transaction ends;
    4. check each fact in order, the first failure refused: its definition version
       exists and is published, its item exists and is active, the version applies to
       the item's class or one of its ancestors (the lineage is read without locks:
       classes never change through the domain, and the deferred trigger re-checks,
       with locks, for writers that skip it), and the value is canonical text for the
       definition's type;
    5. write the values, each naming the item revision it saw, and queue their events
       in order, each depending on that item revision and on the published definition
       revision.
    The deferred INV-07 trigger re-checks the rows at COMMIT.
    """
    writer = uow.stream(scope.tenant_id, scope.catalog_id)
    tx = uow.tx
    t, c = scope.tenant_id, scope.catalog_id
    definitions = rows.get_definitions(tx, t, c, [(f.attribute_key, f.version) for f in facts])
    found = items.get_many_for_share(tx, t, c, [f.item_id for f in facts])
    checked = _check_values(tx, t, c, facts, definitions, found)
    revisions = rows.save_values(
        tx,
        t,
        c,
        [
            ValueWrite(f.item_id, f.attribute_key, f.version, value, item.revision)
            for f, _, item, value in checked
        ],
        scope.decision_id,
    )
    saved: list[int] = []
    for fact, definition, item, value in checked:
        revision = revisions[(fact.item_id, fact.attribute_key)]
        saved.append(revision)
        writer.append(_value_set_event(fact, definition, item, value, revision, scope))
    return saved


def _check_values(
    tx: Transaction,
    t: str,
    c: str,
    facts: Sequence[SetAttributeValue],
    definitions: dict[tuple[str, int], DefinitionRow],
    found: dict[str, ItemRow],
) -> list[tuple[SetAttributeValue, DefinitionRow, ItemRow, str]]:
    """Step 4 of ``set_attribute_values``: check each fact in order, the first failure
    refused; returns each with its definition, its item and its canonical value."""
    where = f"{t}/{c}"
    lineages: dict[str, list[str]] = {}
    checked: list[tuple[SetAttributeValue, DefinitionRow, ItemRow, str]] = []
    for fact in facts:
        name = f"attribute {fact.attribute_key!r} version {fact.version}"
        definition = definitions.get((fact.attribute_key, fact.version))
        if definition is None:
            raise AttributeNotFound(f"no {name} in {where}")
        if definition.status != "published":
            raise AttributeNotPublished(f"{name} is a {definition.status}, not published")
        item = found.get(fact.item_id)
        if item is None:
            raise ItemNotFound(f"no item {fact.item_id!r} in {where}")
        if item.status != "active":
            raise ItemNotActive(f"item {fact.item_id!r} of {where} is {item.status}")
        lineage = lineages.get(item.class_id)
        if lineage is None:
            lineage = lineages[item.class_id] = rows.lineage(tx, t, c, item.class_id)
        if not applies(lineage, definition.applies_to):
            raise AttributeNotApplicable(
                f"{name} applies to {list(definition.applies_to)}, not to item"
                f" {fact.item_id!r} of class {' < '.join(lineage)}"
            )
        value = canonical_value(definition.value_type, definition.allowed_values, fact.value)
        checked.append((fact, definition, item, value))
    return checked


def _value_set_event(
    fact: SetAttributeValue,
    definition: DefinitionRow,
    item: ItemRow,
    value: str,
    revision: int,
    scope: DecisionScope,
) -> PendingEvent:
    """A value's event, depending on the item revision it saw and on the published
    definition revision."""
    return PendingEvent(
        aggregate=AggregateRef(
            type=VALUE, id=value_id(fact.item_id, fact.attribute_key), revision=revision
        ),
        dependencies=(
            AggregateRef(type=ITEM, id=item.item_id, revision=item.revision),
            AggregateRef(
                type=DEFINITION,
                id=definition_id(fact.attribute_key, fact.version),
                revision=definition.revision,
            ),
        ),
        payload=AttributeValueSet(
            item_id=fact.item_id,
            item_revision=item.revision,
            attribute_key=fact.attribute_key,
            definition_version=fact.version,
            value_type=definition.value_type,
            value=value,
            decision_id=scope.decision_id,
        ),
    )


def _defined_event(definition: DefinitionRow) -> PendingEvent:
    d = definition
    return PendingEvent(
        aggregate=AggregateRef(
            type=DEFINITION, id=definition_id(d.attribute_key, d.version), revision=d.revision
        ),
        payload=AttributeDefined(
            attribute_key=d.attribute_key,
            version=d.version,
            label=d.label,
            value_type=d.value_type,
            allowed_values=d.allowed_values,
            applies_to=d.applies_to,
            status=d.status,
            decision_id=d.decision_id,
        ),
    )
