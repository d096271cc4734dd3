"""Classes, attribute definitions and values (INV-07) against real PostgreSQL: the
domain refuses each violation with its typed error and leaves the stored state as
it was; PostgreSQL's deferred triggers refuse the same violations at COMMIT for
writers that bypass the domain, and the write path reports them as the same error."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import psycopg.errors
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from db.settings import DatabaseSettings
from db.tables.attributes import (
    APPLICABILITY_FROZEN,
    DEFINITION_IMMUTABLE,
    NOT_APPLICABLE,
    NOT_PUBLISHED,
    VALUE_INVALID,
)
from db.tables.domain import APP_ROLE
from db.unit_of_work import UnitOfWork
from producers.resolver.attributes.facts import (
    DefineAttribute,
    DefineClass,
    PublishAttribute,
    SetAttributeValue,
    set_attribute_value,
)
from producers.resolver.attributes.rules import canonical_value
from producers.resolver.catalog_items import ItemChange
from producers.resolver.decisions import Decision, record_decision
from producers.resolver.exceptions import (
    AttributeAlreadyPublished,
    AttributeDefinitionInvalid,
    AttributeNotApplicable,
    AttributeNotFound,
    AttributeNotPublished,
    AttributeValueInvalid,
    AttributeVersionExists,
    ClassAlreadyDefined,
    ClassReparentRefused,
    DomainError,
    InvalidClass,
    ItemNotActive,
    ItemNotFound,
    ParentClassNotFound,
)
from producers.resolver.facts import DecisionScope
from schemas.codec import CODEC
from schemas.events import AggregateRef, AttributeDefined, AttributeValueSet, CatalogClassDefined
from tests.fixtures.decisions import accept
from tests.fixtures.waits import lock_waiters, wait_for
from tests.integration.producers.resolver.conftest import (
    EVIDENCE,
    UowFactory,
    assert_contiguous_outbox,
    retire,
)

SIZE = DefineAttribute("size", 1, "Size (EU)", "number", ("footwear",), publish=True)
COLOUR = DefineAttribute("colour", 1, "Colour", "enum", ("shoe",), ("red", "blue"))


def decide(uow: UowFactory, *facts: object) -> uuid.UUID:
    decision = Decision(
        tenant_id="t1",
        catalog_id="c1",
        action="accept",
        actor="reviewer:ana",
        rationale="matches the capture",
        evidence=EVIDENCE,
        facts=facts,  # type: ignore[arg-type]
    )
    with uow() as u:
        record_decision(u, decision)
    return decision.decision_id


def add_item(uow: UowFactory, item_id: str, class_id: str) -> None:
    with uow() as u:
        accept(u, "t1", "c1", ItemChange("t1", "c1", item_id, class_id, f"item {item_id}"))


@dataclass(frozen=True)
class Stored:
    """Everything the attribute facts and the stream writer store."""

    classes: list[tuple[object, ...]]
    definitions: list[tuple[object, ...]]
    applicability: list[tuple[object, ...]]
    values: list[tuple[object, ...]]
    decisions: int
    cursor: int


def stored(dsn: str) -> Stored:
    with psycopg.connect(dsn) as conn:

        def rows(query: str) -> list[tuple[object, ...]]:
            return conn.execute(query).fetchall()

        cursor = conn.execute("SELECT coalesce(max(position), 0) FROM stream_cursor").fetchone()
        decisions = conn.execute("SELECT count(*) FROM decision").fetchone()
        return Stored(
            rows("SELECT class_id, parent_class_id FROM catalog_class ORDER BY 1"),
            rows(
                "SELECT attribute_key, version, status, revision FROM attribute_definition"
                " ORDER BY 1, 2"
            ),
            rows("SELECT attribute_key, version, class_id FROM attribute_applicability ORDER BY 1"),
            rows(
                "SELECT item_id, attribute_key, definition_version, value, item_revision,"
                " revision FROM attribute_value ORDER BY 1, 2"
            ),
            int(decisions[0]) if decisions else 0,
            int(cursor[0]) if cursor else 0,
        )


def events(
    dsn: str, event_type: str
) -> list[tuple[AggregateRef, tuple[AggregateRef, ...], object]]:
    with psycopg.connect(dsn) as conn:
        values = [
            r[0]
            for r in conn.execute(
                "SELECT value FROM outbox WHERE event_type = %s ORDER BY position", (event_type,)
            )
        ]
    decoded = [CODEC.decode_value(v) for v in values]
    return [(e.aggregate, e.dependencies, e.payload) for e in decoded]


ERRORS: dict[str, type[DomainError]] = {
    error.code: error
    for error in (
        AttributeAlreadyPublished,
        AttributeNotApplicable,
        AttributeNotFound,
        AttributeNotPublished,
        AttributeValueInvalid,
        AttributeVersionExists,
        ClassAlreadyDefined,
        ClassReparentRefused,
        ItemNotActive,
        ItemNotFound,
        ParentClassNotFound,
    )
}


def refused(uow: UowFactory, dsn: str, code: str, *facts: object) -> None:
    """The facts are refused with the typed error of ``code`` and nothing stored changes."""
    before = stored(dsn)
    with pytest.raises(ERRORS[code]) as caught:
        decide(uow, *facts)
    assert caught.value.code == code
    assert stored(dsn) == before


@pytest.fixture()
def shoes(uow: UowFactory) -> UowFactory:
    """footwear > shoe > sneaker; items i1 (sneaker), i2 (hat, never registered);
    "size" (number, footwear) published, "colour" (enum, shoe) a draft."""
    decide(
        uow,
        DefineClass("footwear"),
        DefineClass("shoe", "footwear"),
        DefineClass("sneaker", "shoe"),
        SIZE,
        COLOUR,
    )
    add_item(uow, "i1", "sneaker")
    add_item(uow, "i2", "hat")
    return uow


# --- the accepted path ------------------------------------------------------------------


def test_a_value_applies_through_the_class_lineage_and_each_write_is_a_revision(
    shoes: UowFactory, clean_db: DatabaseSettings
) -> None:
    dsn = clean_db.resolver_dsn
    first = decide(shoes, SetAttributeValue("i1", "size", 1, "42.50"))
    second = decide(shoes, SetAttributeValue("i1", "size", 1, 43))
    assert stored(dsn).values == [("i1", "size", 1, "43", 1, 2)]

    (defined_size, defined_colour) = events(dsn, "attribute_definition.defined")
    assert defined_size[0] == AggregateRef(type="attribute_definition", id="size/1", revision=1)
    assert isinstance(defined_size[2], AttributeDefined)
    assert (defined_size[2].status, defined_size[2].applies_to) == ("published", ("footwear",))
    assert isinstance(defined_colour[2], AttributeDefined)
    assert (defined_colour[2].status, defined_colour[2].allowed_values) == (
        "draft",
        ("red", "blue"),
    )

    set_events = events(dsn, "attribute_value.set")
    assert [e[0] for e in set_events] == [
        AggregateRef(type="attribute_value", id="i1/size", revision=1),
        AggregateRef(type="attribute_value", id="i1/size", revision=2),
    ]
    for _aggregate, dependencies, _payload in set_events:
        assert dependencies == (
            AggregateRef(type="catalog_item", id="i1", revision=1),
            AggregateRef(type="attribute_definition", id="size/1", revision=1),
        )
    payloads = [e[2] for e in set_events]
    assert payloads == [
        AttributeValueSet(
            item_id="i1",
            item_revision=1,
            attribute_key="size",
            definition_version=1,
            value_type="number",
            value=value,
            decision_id=decision_id,
        )
        for value, decision_id in (("42.5", first), ("43", second))
    ]
    classes = [
        (aggregate.id, aggregate.revision, dependencies, payload)
        for aggregate, dependencies, payload in events(dsn, "catalog_class.defined")
    ]
    assert [c[:3] for c in classes] == [(c, 1, ()) for c in ("footwear", "shoe", "sneaker")]
    parents = [p.parent_class_id for *_, p in classes if isinstance(p, CatalogClassDefined)]
    assert parents == [None, "footwear", "shoe"]
    assert_contiguous_outbox(dsn)


def test_publishing_a_draft_is_its_next_revision_and_values_may_then_use_it(
    shoes: UowFactory, clean_db: DatabaseSettings
) -> None:
    dsn = clean_db.resolver_dsn
    published_by = decide(shoes, PublishAttribute("colour", 1))
    decide(shoes, SetAttributeValue("i1", "colour", 1, "blue"))
    assert ("colour", 1, "published", 2) in stored(dsn).definitions
    published = events(dsn, "attribute_definition.defined")[-1]
    assert published[0] == AggregateRef(type="attribute_definition", id="colour/1", revision=2)
    assert isinstance(published[2], AttributeDefined)
    assert (published[2].status, published[2].decision_id) == ("published", published_by)
    value_event = events(dsn, "attribute_value.set")[-1]
    assert value_event[1][1] == AggregateRef(type="attribute_definition", id="colour/1", revision=2)


def test_a_value_may_move_to_a_newer_definition_version(
    shoes: UowFactory, clean_db: DatabaseSettings
) -> None:
    decide(shoes, SetAttributeValue("i1", "size", 1, 42))
    decide(
        shoes,
        DefineAttribute("size", 2, "Size (US)", "text", ("sneaker",), publish=True),
        SetAttributeValue("i1", "size", 2, "9 1/2"),
    )
    assert stored(clean_db.resolver_dsn).values == [("i1", "size", 2, "9 1/2", 1, 2)]


# --- INV-07 in the domain: each violation refused, nothing stored -------------------------


def test_each_violation_is_refused_with_its_code_and_changes_nothing(
    shoes: UowFactory, clean_db: DatabaseSettings
) -> None:
    dsn = clean_db.resolver_dsn
    add_item(shoes, "i3", "sneaker")
    retire(shoes, "i3")
    cases = [
        ("ATTRIBUTE_NOT_FOUND", SetAttributeValue("i1", "weight", 1, 1)),
        ("ATTRIBUTE_NOT_FOUND", SetAttributeValue("i1", "size", 9, 1)),
        ("ATTRIBUTE_NOT_PUBLISHED", SetAttributeValue("i1", "colour", 1, "red")),
        ("ATTRIBUTE_NOT_APPLICABLE", SetAttributeValue("i2", "size", 1, 40)),
        ("ATTRIBUTE_VALUE_INVALID", SetAttributeValue("i1", "size", 1, "big")),
        ("ITEM_NOT_ACTIVE", SetAttributeValue("i3", "size", 1, 40)),
        ("ITEM_NOT_FOUND", SetAttributeValue("nope", "size", 1, 40)),
    ]
    for code, fact in cases:
        # Each after an accepted fact of the same decision: that one rolls back too.
        refused(shoes, dsn, code, SetAttributeValue("i1", "size", 1, 40), fact)
    # References nothing could have are refused before any I/O.
    with pytest.raises(ItemNotFound):
        SetAttributeValue("i\x00", "size", 1, 40)
    for key, version in (("a/b", 1), ("size", 0), ("size", 2**31)):
        with pytest.raises(AttributeNotFound):
            SetAttributeValue("i1", key, version, 40)
    assert stored(dsn).values == []


def test_values_are_checked_against_the_type_and_stored_canonically(
    shoes: UowFactory, clean_db: DatabaseSettings
) -> None:
    dsn = clean_db.resolver_dsn
    decide(
        shoes,
        DefineAttribute("vegan", 1, "Vegan", "boolean", ("shoe",), publish=True),
        DefineAttribute("fit", 1, "Fit", "enum", ("shoe",), ("narrow", "wide"), publish=True),
        DefineAttribute("note", 1, "Note", "text", ("shoe",), publish=True),
    )
    for raw, canonical in (("-0.250", "-0.25"), (1e2, "100"), ("0.0", "0"), (7, "7")):
        decide(shoes, SetAttributeValue("i1", "size", 1, raw))
        assert stored(dsn).values[-1][3] == canonical
    decide(
        shoes,
        SetAttributeValue("i1", "vegan", 1, True),
        SetAttributeValue("i1", "fit", 1, "wide"),
        SetAttributeValue("i1", "note", 1, "runs small"),
    )
    invalid = [
        ("size", True),
        ("size", "NaN"),
        ("size", "1e999"),
        ("vegan", "yes"),
        ("vegan", 1),
        ("fit", "Wide"),
        ("note", ""),
        ("note", 5),
    ]
    for key, raw in invalid:
        refused(shoes, dsn, "ATTRIBUTE_VALUE_INVALID", SetAttributeValue("i1", key, 1, raw))
    assert [(v[1], v[3]) for v in stored(dsn).values] == [
        ("fit", "wide"),
        ("note", "runs small"),
        ("size", "7"),
        ("vegan", "true"),
    ]


def test_definitions_are_versioned_and_published_once(
    shoes: UowFactory, clean_db: DatabaseSettings
) -> None:
    dsn = clean_db.resolver_dsn
    refused(shoes, dsn, "ATTRIBUTE_VERSION_EXISTS", SIZE)
    refused(shoes, dsn, "ATTRIBUTE_ALREADY_PUBLISHED", PublishAttribute("size", 1))
    refused(shoes, dsn, "ATTRIBUTE_NOT_FOUND", PublishAttribute("size", 2))
    decide(shoes, PublishAttribute("colour", 1))
    refused(shoes, dsn, "ATTRIBUTE_ALREADY_PUBLISHED", PublishAttribute("colour", 1))
    for bad in (
        {"attribute_key": "a/b"},
        {"attribute_key": ""},
        {"version": 0},
        {"label": ""},
        {"value_type": "date"},
        {"value_type": "enum"},  # no allowed values
        {"allowed_values": ("x",)},  # on a number
        {"applies_to": ()},
        {"applies_to": ("shoe", "shoe")},
    ):
        fields = {
            "attribute_key": "weight",
            "version": 1,
            "label": "Weight",
            "value_type": "number",
            "applies_to": ("shoe",),
            "allowed_values": (),
        }
        fields.update(bad)
        with pytest.raises(AttributeDefinitionInvalid) as caught:
            DefineAttribute(**fields)  # type: ignore[arg-type]
        assert caught.value.code == "ATTRIBUTE_DEFINITION_INVALID", bad


def test_classes_are_defined_once_and_never_move(
    shoes: UowFactory, clean_db: DatabaseSettings
) -> None:
    dsn = clean_db.resolver_dsn
    refused(shoes, dsn, "CLASS_ALREADY_DEFINED", DefineClass("shoe", "footwear"))
    refused(shoes, dsn, "CLASS_REPARENT_REFUSED", DefineClass("sneaker"))
    refused(shoes, dsn, "PARENT_CLASS_NOT_FOUND", DefineClass("boot", "hat"))
    with pytest.raises(InvalidClass):
        DefineClass("boot", "boot")
    # A class registered late gives items that already carry it their lineage.
    refused(shoes, dsn, "ATTRIBUTE_NOT_APPLICABLE", SetAttributeValue("i2", "size", 1, 1))
    decide(shoes, DefineClass("hat", "footwear"), SetAttributeValue("i2", "size", 1, 1))
    assert [v[:2] for v in stored(dsn).values] == [("i2", "size")]


def test_an_item_keeps_a_class_its_values_apply_to(
    shoes: UowFactory, clean_db: DatabaseSettings
) -> None:
    dsn = clean_db.resolver_dsn
    decide(shoes, SetAttributeValue("i1", "size", 1, 42))
    refused(shoes, dsn, "ATTRIBUTE_NOT_APPLICABLE", ItemChange("t1", "c1", "i1", "hat", "i1"))
    decide(shoes, ItemChange("t1", "c1", "i1", "shoe", "item i1, plain shoe"))
    with psycopg.connect(dsn) as conn:
        assert conn.execute(
            "SELECT class_id, revision FROM catalog_item WHERE item_id = 'i1'"
        ).fetchone() == ("shoe", 2)


# --- INV-07 in PostgreSQL: writers that bypass the domain -------------------------------------


@pytest.fixture()
def raw(shoes: UowFactory, clean_db: DatabaseSettings) -> Iterator[psycopg.Connection]:
    """A connection as the table owner (more privileges than the application role:
    the triggers must hold even so), with a decision to name and a published value."""
    decide(shoes, SetAttributeValue("i1", "size", 1, 42))
    with psycopg.connect(clean_db.resolver_owner_dsn) as conn:
        yield conn


def _decision_id(conn: psycopg.Connection) -> uuid.UUID:
    row = conn.execute("SELECT decision_id FROM decision LIMIT 1").fetchone()
    assert row is not None
    return uuid.UUID(str(row[0]))


def _insert_value(conn: psycopg.Connection, item: str, key: str, version: int, value: str) -> None:
    conn.execute(
        "INSERT INTO attribute_value (tenant_id, catalog_id, item_id, attribute_key,"
        " definition_version, value, item_revision, revision, decision_id)"
        " VALUES ('t1', 'c1', %s, %s, %s, %s, 1, 1, %s)",
        (item, key, version, value, _decision_id(conn)),
    )


def _commit_refused(conn: psycopg.Connection, constraint: str) -> None:
    """COMMIT fails with SQLSTATE 23514 naming ``constraint``; the statements before it
    succeeded (the check is deferred)."""
    with pytest.raises(psycopg.errors.CheckViolation) as caught:
        conn.commit()
    assert caught.value.sqlstate == "23514"
    assert caught.value.diag.constraint_name == constraint
    assert (caught.value.diag.message_primary or "").startswith("INV-07: ")


@pytest.mark.parametrize(
    ("item", "key", "version", "value", "constraint"),
    [
        ("i1", "colour", 1, "red", NOT_PUBLISHED),  # a draft
        ("i2", "size", 1, "40", NOT_APPLICABLE),  # class hat: no lineage to footwear
        ("i1", "size", 1, "40.0", VALUE_INVALID),  # not canonical
        ("i1", "size", 1, "forty", VALUE_INVALID),
    ],
)
def test_postgres_refuses_a_bad_value_at_commit(
    raw: psycopg.Connection, item: str, key: str, version: int, value: str, constraint: str
) -> None:
    raw.execute("DELETE FROM attribute_value")
    _insert_value(raw, item, key, version, value)  # accepted for now: deferred
    _commit_refused(raw, constraint)
    assert raw.execute("SELECT count(*) FROM attribute_value").fetchone() == (1,)


def test_postgres_checks_the_state_at_commit_not_at_each_statement(
    raw: psycopg.Connection,
) -> None:
    """A value written before its item's class is registered commits once it is."""
    raw.execute(
        "INSERT INTO catalog_item (tenant_id, catalog_id, item_id, class_id, status, title,"
        " attributes, revision, decision_id)"
        " VALUES ('t1', 'c1', 'i9', 'boot', 'active', 'boot', '{}', 1, %s)",
        (_decision_id(raw),),
    )
    _insert_value(raw, "i9", "size", 1, "44")
    raw.execute(
        "INSERT INTO catalog_class (tenant_id, catalog_id, class_id, parent_class_id,"
        " decision_id) VALUES ('t1', 'c1', 'boot', 'footwear', %s)",
        (_decision_id(raw),),
    )
    raw.commit()
    assert raw.execute("SELECT value FROM attribute_value WHERE item_id = 'i9'").fetchone() == (
        "44",
    )


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE catalog_item SET class_id = 'hat' WHERE item_id = 'i1'",
        "UPDATE catalog_class SET parent_class_id = NULL WHERE class_id = 'shoe'",
        "DELETE FROM catalog_class WHERE class_id = 'sneaker'",
    ],
)
def test_postgres_refuses_a_class_change_that_strands_a_value(
    raw: psycopg.Connection, statement: str
) -> None:
    raw.execute(statement)
    _commit_refused(raw, NOT_APPLICABLE)


def test_postgres_allows_a_class_change_the_values_survive(raw: psycopg.Connection) -> None:
    raw.execute("UPDATE catalog_item SET class_id = 'shoe' WHERE item_id = 'i1'")
    raw.execute("UPDATE catalog_class SET parent_class_id = NULL WHERE class_id = 'sneaker'")
    raw.execute("UPDATE catalog_class SET parent_class_id = 'shoe' WHERE class_id = 'sneaker'")
    raw.commit()


_SIZE = "WHERE attribute_key = 'size'"


@pytest.mark.parametrize(
    ("statements", "constraint"),
    [
        ([f"UPDATE attribute_definition SET label = 'Size' {_SIZE}"], DEFINITION_IMMUTABLE),
        ([f"UPDATE attribute_definition SET status = 'draft' {_SIZE}"], DEFINITION_IMMUTABLE),
        (
            ["DELETE FROM attribute_value", f"DELETE FROM attribute_definition {_SIZE}"],
            DEFINITION_IMMUTABLE,
        ),
        ([f"DELETE FROM attribute_applicability {_SIZE}"], APPLICABILITY_FROZEN),
        ([f"UPDATE attribute_applicability SET class_id = 'hat' {_SIZE}"], APPLICABILITY_FROZEN),
        (
            ["INSERT INTO attribute_applicability VALUES ('t1', 'c1', 'size', 1, 'hat')"],
            APPLICABILITY_FROZEN,
        ),
    ],
)
def test_postgres_keeps_a_published_version_as_it_is(
    raw: psycopg.Connection, statements: list[str], constraint: str
) -> None:
    with pytest.raises(psycopg.errors.CheckViolation) as caught:
        for statement in statements:
            raw.execute(statement)
    assert caught.value.diag.constraint_name == constraint


def test_a_draft_may_still_change(raw: psycopg.Connection) -> None:
    raw.execute("INSERT INTO attribute_applicability VALUES ('t1', 'c1', 'colour', 1, 'hat')")
    raw.execute("UPDATE attribute_definition SET label = 'Colour' WHERE attribute_key = 'colour'")
    raw.commit()


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM attribute_value",
        "DELETE FROM attribute_definition",
        "DELETE FROM attribute_applicability",
        "DELETE FROM catalog_class",
        "UPDATE catalog_class SET parent_class_id = NULL",
        "UPDATE attribute_applicability SET class_id = 'hat'",
    ],
)
def test_the_application_role_cannot_delete_or_reshape_attribute_state(
    raw: psycopg.Connection, statement: str
) -> None:
    raw.execute(f"SET ROLE {APP_ROLE}")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        raw.execute(statement)


@dataclass(frozen=True, slots=True)
class WriteValueRow:
    """A fact that writes a value row as it is told, skipping the domain's checks: what
    a buggy or hand-written writer inside the write path would do."""

    item_id: str
    attribute_key: str
    version: int
    value: str

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        uow.stream(scope.tenant_id, scope.catalog_id)
        uow.tx.execute(
            "INSERT INTO attribute_value (tenant_id, catalog_id, item_id, attribute_key,"
            " definition_version, value, item_revision, revision, decision_id)"
            " VALUES (%s, %s, %s, %s, %s, %s, 1, 1, %s)",
            (
                scope.tenant_id,
                scope.catalog_id,
                self.item_id,
                self.attribute_key,
                self.version,
                self.value,
                scope.decision_id,
            ),
        )


@pytest.mark.parametrize(
    ("fact", "code"),
    [
        (WriteValueRow("i2", "size", 1, "40"), "ATTRIBUTE_NOT_APPLICABLE"),
        (WriteValueRow("i1", "colour", 1, "red"), "ATTRIBUTE_NOT_PUBLISHED"),
        (WriteValueRow("i1", "size", 1, "4.0"), "ATTRIBUTE_VALUE_INVALID"),
    ],
)
def test_a_violation_found_at_commit_is_the_same_typed_error(
    shoes: UowFactory, clean_db: DatabaseSettings, fact: WriteValueRow, code: str
) -> None:
    """The domain's checks are skipped, so only PostgreSQL's deferred check at COMMIT
    can refuse these; ``record_decision`` reports it as the domain's own error."""
    refused(shoes, clean_db.resolver_dsn, code, fact)


# --- concurrency ---------------------------------------------------------------------------


def test_the_item_is_share_locked_until_the_value_commits(
    shoes: UowFactory, clean_db: DatabaseSettings
) -> None:
    """Even a writer that skipped the cursor lock cannot retire or reclassify the item
    while a value set against its revision is being committed."""
    decision_id = decide(shoes)
    with shoes() as u:
        scope = DecisionScope("t1", "c1", decision_id)
        set_attribute_value(u, scope, SetAttributeValue("i1", "size", 1, 42))
        with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as other:
            other.execute("SET lock_timeout = '300ms'")  # for the session
            for change in ("status = 'retired'", "class_id = 'hat'"):
                with pytest.raises(psycopg.errors.LockNotAvailable):
                    other.execute(f"UPDATE catalog_item SET {change} WHERE item_id = 'i1'")


def _stranded(dsn: str) -> list[tuple[object, ...]]:
    """Values whose definition does not reach their item's class, computed here with
    a recursive walk of its own (not the trigger's)."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "WITH RECURSIVE up(item_id, class_id) AS ("
            " SELECT item_id, class_id FROM catalog_item"
            " UNION SELECT up.item_id, c.parent_class_id FROM up JOIN catalog_class c"
            "  ON c.class_id = up.class_id WHERE c.parent_class_id IS NOT NULL)"
            " SELECT v.item_id, v.attribute_key FROM attribute_value v WHERE NOT EXISTS ("
            "  SELECT 1 FROM up JOIN attribute_applicability a ON a.class_id = up.class_id"
            "  WHERE up.item_id = v.item_id AND a.attribute_key = v.attribute_key"
            "  AND a.version = v.definition_version)"
        ).fetchall()


def test_a_value_and_a_concurrent_reparent_never_both_commit(raw: psycopg.Connection) -> None:
    """Two writers that both skip the domain: one sets a value through the class
    lineage while the other re-parents a class on that lineage. Whatever the order,
    at most one commits and no value is left outside its definition's reach."""
    dsn = raw.info.dsn
    raw.execute("DELETE FROM attribute_value")
    raw.commit()
    outcomes: dict[str, BaseException | None] = {}

    def reparent(conn: psycopg.Connection) -> None:
        try:
            conn.commit()
            outcomes["reparent"] = None
        except psycopg.Error as exc:
            outcomes["reparent"] = exc

    with psycopg.connect(dsn) as value_writer, psycopg.connect(dsn) as class_writer:
        _insert_value(value_writer, "i1", "size", 1, "41")
        class_writer.execute(
            "UPDATE catalog_class SET parent_class_id = NULL WHERE class_id = 'shoe'"
        )
        # The value's COMMIT walks i1's lineage and waits at 'shoe', which the
        # re-parent holds; the re-parent commits first and the value then sees it.
        waiting = value_writer.info.backend_pid
        committing = threading.Thread(target=lambda: _commit_into(value_writer, outcomes))
        committing.start()
        wait_for(
            lambda: lock_waiters(dsn, waiting) == 1,
            "the value's check waiting for the re-parent",
            60,
        )
        assert committing.is_alive()
        reparent(class_writer)
        committing.join(timeout=30)
    assert outcomes["reparent"] is None
    assert isinstance(outcomes["value"], psycopg.errors.CheckViolation)
    assert _stranded(dsn) == []


def _commit_into(conn: psycopg.Connection, outcomes: dict[str, BaseException | None]) -> None:
    try:
        conn.commit()
        outcomes["value"] = None
    except psycopg.Error as exc:
        outcomes["value"] = exc


# --- the domain and PostgreSQL agree on canonical values ------------------------------------

number_texts = st.one_of(
    st.from_regex(r"[-+]?[0-9]{0,4}(\.[0-9]{0,4})?([eE][-+]?[0-9])?", fullmatch=True),
    st.decimals(allow_nan=False, allow_infinity=False, places=6).map(str),
    st.text(max_size=6).filter(lambda t: "\x00" not in t),  # PostgreSQL text holds no NUL
)


@settings(max_examples=200, deadline=None)
@given(number_texts)
def test_postgres_accepts_a_number_text_exactly_when_the_domain_calls_it_canonical(
    db_settings: DatabaseSettings, text: str
) -> None:
    try:
        canonical = canonical_value("number", (), text) == text
    except AttributeValueInvalid:
        canonical = False
    with psycopg.connect(db_settings.resolver_dsn) as conn:
        row = conn.execute("SELECT attribute_value_fits('number', '{}', %s)", (text,)).fetchone()
    assert row == (canonical,)


@pytest.mark.parametrize(
    ("value_type", "allowed", "text", "fits"),
    [
        ("boolean", [], "true", True),
        ("boolean", [], "TRUE", False),
        ("enum", ["red", "blue"], "blue", True),
        ("enum", ["red", "blue"], "green", False),
        ("text", [], "anything", True),
        ("text", [], "", False),
        ("date", [], "2027-01-01", False),
    ],
)
def test_postgres_type_check_of_the_other_types(
    db_settings: DatabaseSettings, value_type: str, allowed: list[str], text: str, fits: bool
) -> None:
    with psycopg.connect(db_settings.resolver_dsn) as conn:
        row = conn.execute(
            "SELECT attribute_value_fits(%s, %s, %s)", (value_type, allowed, text)
        ).fetchone()
    assert row == (fits,)


# --- any input: a typed error or an accepted value, never anything else ---------------------

raw_values = st.one_of(
    st.text(max_size=8),
    st.integers(),
    st.floats(),
    st.booleans(),
    st.decimals(),
)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    item_id=st.one_of(st.sampled_from(["i1", "i2", "nope", "i\x00"]), st.text(max_size=4)),
    key=st.one_of(st.sampled_from(["size", "colour", "x/y"]), st.text(max_size=4)),
    version=st.one_of(st.sampled_from([1, 2]), st.integers(min_value=-2, max_value=2**40)),
    value=raw_values,
)
def test_any_value_fact_is_accepted_or_refused_with_a_domain_error(
    shoes: UowFactory, item_id: str, key: str, version: int, value: object
) -> None:
    try:
        decide(shoes, SetAttributeValue(item_id, key, version, value))  # type: ignore[arg-type]
    except DomainError as exc:
        assert exc.code.isupper()
