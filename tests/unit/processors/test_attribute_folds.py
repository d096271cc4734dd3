"""The attribute-definition and attribute-value folds, their aggregate ids, and how
the planner parks a value until its item and definition revisions are applied (pure:
no database)."""

from __future__ import annotations

from processors.applier.plan import APPLIED, PARKED, Parked, plan_batch
from processors.projections import attribute_definitions, attribute_values, registry
from schemas.codec import CODEC
from schemas.events import AttributeDefined, AttributeValueSet, CatalogItemUpserted, Envelope
from tests.unit.processors.builders import DECISION, event, ref

ITEM = ("t1", "c1", "catalog_item", "i1")
SIZE_1 = ("t1", "c1", "attribute_definition", "size/1")


def defined(position: int, revision: int, status: str, version: int = 1) -> Envelope:
    return event(
        position,
        ref("attribute_definition", f"size/{version}", revision),
        AttributeDefined(
            attribute_key="size",
            version=version,
            label="Size",
            value_type="number",
            applies_to=("footwear",),
            status=status,
            decision_id=DECISION,
        ),
    )


def value_set(
    position: int, revision: int, value: str, item_revision: int = 1, definition_revision: int = 1
) -> Envelope:
    return event(
        position,
        ref("attribute_value", "i1/size", revision),
        AttributeValueSet(
            item_id="i1",
            item_revision=item_revision,
            attribute_key="size",
            definition_version=1,
            value_type="number",
            value=value,
            decision_id=DECISION,
        ),
        ref("catalog_item", "i1", item_revision),
        ref("attribute_definition", "size/1", definition_revision),
    )


def upserted(position: int, revision: int) -> Envelope:
    return event(
        position,
        ref("catalog_item", "i1", revision),
        CatalogItemUpserted(class_id="sneaker", status="active", title="i1"),
    )


def test_the_value_fold_keeps_the_newest_revision_per_item_and_key() -> None:
    rows = attribute_values.fold(
        [value_set(5, 2, "43"), upserted(1, 1), value_set(4, 1, "42"), defined(2, 1, "published")]
    )
    assert list(rows) == [("t1", "c1", "attribute_value", "i1/size")]
    row = rows[("t1", "c1", "attribute_value", "i1/size")]
    assert (row.item_id, row.attribute_key, row.value, row.revision, row.position) == (
        "i1",
        "size",
        "43",
        2,
        5,
    )


def test_the_definition_fold_keeps_each_version_at_its_newest_revision() -> None:
    rows = attribute_definitions.fold(
        [defined(3, 2, "published"), defined(1, 1, "draft"), defined(4, 1, "draft", version=2)]
    )
    assert {k[3]: (r.status, r.revision) for k, r in rows.items()} == {
        "size/1": ("published", 2),
        "size/2": ("draft", 1),
    }


def test_both_aggregates_have_a_projection() -> None:
    kept = {p.aggregate for p in registry.PROJECTIONS}
    assert {"attribute_definition", "attribute_value"} <= kept
    assert "catalog_class" not in kept  # its events are never depended on


def test_a_value_parks_until_both_its_item_and_definition_revisions_are_applied() -> None:
    value = value_set(4, 1, "42", definition_revision=2)
    nothing = lambda keys: ([], {})  # noqa: E731
    for revisions in ({}, {ITEM: 1}, {SIZE_1: 2}, {ITEM: 1, SIZE_1: 1}):
        plan = plan_batch([value], dict(revisions), [], nothing)
        assert plan.outcomes == {value.event_id: PARKED}, revisions
    plan = plan_batch([value], {ITEM: 1, SIZE_1: 2}, [], nothing)
    assert plan.outcomes == {value.event_id: APPLIED}


def test_a_parked_value_is_released_by_the_batch_that_applies_its_last_dependency() -> None:
    value = value_set(3, 1, "42")
    parked = Parked(value, CODEC.encode_value(value))
    definition = defined(2, 1, "published")
    plan = plan_batch([definition], {ITEM: 1}, [parked], lambda keys: ([], {}))
    assert plan.outcomes == {definition.event_id: APPLIED}
    assert plan.released == {value.event_id: APPLIED}
    assert [e.event_id for e in plan.to_apply] == [definition.event_id, value.event_id]
