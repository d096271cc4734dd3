"""The resolver domain's newer events reach the product applier without harm: the
catalog projection folds only item events, and a listing mapping waits (parked) for
the item revision it depends on."""

from __future__ import annotations

from processors.applier.plan import APPLIED, PARKED, plan_batch
from processors.projections.catalog_items import ItemState, fold
from schemas.events import (
    CatalogItemSplit,
    CatalogItemUpserted,
    DecisionRecorded,
    EvidenceRef,
    ListingMapped,
    ShippingPolicyVersioned,
)
from tests.unit.processors.builders import DECISION, T0, event, ref

ITEM_I1 = ref("catalog_item", "i1", 1)
EVENTS = [
    event(
        1,
        ref("decision", str(DECISION), 1),
        DecisionRecorded(
            action="accept",
            actor="ana",
            actor_kind="human",
            rationale="r",
            evidence=(EvidenceRef(capture_id="c", locator="l"),),
        ),
    ),
    event(
        2,
        ref("listing_mapping", "L1", 1),
        ListingMapped(item_id="i1", item_revision=1, decision_id=DECISION),
        ITEM_I1,
    ),
    event(3, ITEM_I1, CatalogItemUpserted(class_id="shoe", status="active", title="i1")),
    event(
        4,
        ref("shipping_policy", "std", 1),
        ShippingPolicyVersioned(scope="DE", effective_from=T0, decision_id=DECISION),
    ),
    event(
        5,
        ref("item_split", "s1", 1),
        CatalogItemSplit(
            source_item_id="i1",
            source_revision=1,
            successor_item_ids=("i1-a",),
            decision_id=DECISION,
        ),
        ITEM_I1,
    ),
]


def test_fold_projects_item_events_and_ignores_the_others() -> None:
    changes = fold(EVENTS)
    assert list(changes) == [("t1", "c1", "catalog_item", "i1")]
    change = changes[("t1", "c1", "catalog_item", "i1")]
    assert isinstance(change, ItemState) and change.revision == 1


def test_a_mapping_waits_for_its_item_revision() -> None:
    mapping = EVENTS[1]
    alone = plan_batch([mapping], {}, [], lambda keys: ([], {}))
    assert alone.outcomes[mapping.event_id] == PARKED
    together = plan_batch(EVENTS, {}, [], lambda keys: ([], {}))
    assert set(together.outcomes.values()) == {APPLIED}
