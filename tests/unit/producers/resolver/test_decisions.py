"""What a decision's events say it changed and relied on (``effects``, pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from db.stream_writer import PendingEvent
from producers.resolver.decisions import CHANGED, RELIED_ON, effects
from schemas.events import AggregateRef, CatalogItemRetired


def event(aggregate: AggregateRef, *deps: AggregateRef) -> PendingEvent:
    return PendingEvent(aggregate, CatalogItemRetired(reason="r"), deps)


def ref(kind: str, id_: str, revision: int) -> AggregateRef:
    return AggregateRef(type=kind, id=id_, revision=revision)


def test_changed_in_event_order_then_each_other_dependency_once() -> None:
    item = ref("catalog_item", "i1", 3)
    events = [
        event(ref("decision", "d", 1)),
        event(ref("listing_mapping", "L1", 1), item),
        event(ref("listing_mapping", "L2", 4), item),
        event(ref("catalog_item", "v1", 1), ref("catalog_item", "p", 2)),
        event(ref("item_split", "s", 1), ref("catalog_item", "v1", 1)),
    ]
    assert [(e.role, e.aggregate_type, e.aggregate_id, e.revision) for e in effects(events)] == [
        (CHANGED, "decision", "d", 1),
        (CHANGED, "listing_mapping", "L1", 1),
        (CHANGED, "listing_mapping", "L2", 4),
        (CHANGED, "catalog_item", "v1", 1),
        (CHANGED, "item_split", "s", 1),
        (RELIED_ON, "catalog_item", "i1", 3),
        (RELIED_ON, "catalog_item", "p", 2),  # v1 itself was changed by this decision
    ]


refs = st.builds(
    ref,
    st.sampled_from(["catalog_item", "listing_mapping"]),
    st.sampled_from("abc"),
    st.integers(1, 3),
)


@given(st.lists(st.tuples(refs, st.lists(refs, max_size=3)), max_size=8, unique_by=lambda t: t[0]))
def test_every_revision_appears_once_with_one_role(
    spec: list[tuple[AggregateRef, list[AggregateRef]]],
) -> None:
    found = effects([event(a, *deps) for a, deps in spec])
    keys = [(e.aggregate_type, e.aggregate_id, e.revision) for e in found]
    assert len(keys) == len(set(keys))
    changed = {(a.type, a.id, a.revision) for a, _ in spec}
    relied = {(d.type, d.id, d.revision) for _, deps in spec for d in deps} - changed
    assert {k for k, e in zip(keys, found, strict=True) if e.role == CHANGED} == changed
    assert {k for k, e in zip(keys, found, strict=True) if e.role == RELIED_ON} == relied
