"""The listing-mapping, shipping-policy and split folds, and the registry that routes
a batch's events to them (pure: no database)."""

from __future__ import annotations

import uuid
from datetime import timedelta

from processors.applier.plan import APPLIED, IGNORED_STALE, PARKED, plan_batch
from processors.projections import item_splits, listing_mappings, registry, shipping_policies
from schemas.events import (
    CatalogItemSplit,
    CatalogItemUpserted,
    DecisionRecorded,
    Envelope,
    EvidenceRef,
    ListingMapped,
    ShippingPolicyVersioned,
)
from tests.unit.processors.builders import DECISION, T0, event, ref


def mapped(position: int, listing: str, revision: int, item: str, item_revision: int) -> Envelope:
    return event(
        position,
        ref("listing_mapping", listing, revision),
        ListingMapped(item_id=item, item_revision=item_revision, decision_id=DECISION),
        ref("catalog_item", item, item_revision),
    )


def versioned(position: int, policy: str, version: int, scope: str = "DE") -> Envelope:
    start = T0 + timedelta(days=30 * version)
    return event(
        position,
        ref("shipping_policy", policy, version),
        ShippingPolicyVersioned(
            scope=scope,
            effective_from=start,
            effective_to=start + timedelta(days=30),
            terms={"carrier": "dhl"},
            decision_id=DECISION,
        ),
    )


def upserted(position: int, item: str, revision: int) -> Envelope:
    return event(
        position,
        ref("catalog_item", item, revision),
        CatalogItemUpserted(class_id="shoe", status="active", title=item),
    )


def decided(position: int) -> Envelope:
    return event(
        position,
        ref("decision", str(uuid.uuid4()), 1),
        DecisionRecorded(
            action="accept",
            actor="ana",
            actor_kind="human",
            rationale="r",
            evidence=(EvidenceRef(capture_id="c", locator="l"),),
        ),
    )


def test_mapping_fold_keeps_the_latest_revision_per_listing_and_ignores_other_events() -> None:
    events = [
        upserted(1, "i1", 1),
        mapped(2, "L1", 1, "i1", 1),
        versioned(3, "std", 1),
        mapped(4, "L1", 2, "i2", 3),
        mapped(5, "L2", 1, "i1", 1),
    ]
    rows = listing_mappings.fold(events)
    assert sorted(rows) == [
        ("t1", "c1", "listing_mapping", "L1"),
        ("t1", "c1", "listing_mapping", "L2"),
    ]
    l1 = rows[("t1", "c1", "listing_mapping", "L1")]
    assert (l1.item_id, l1.item_revision, l1.revision, l1.position) == ("i2", 3, 2, 4)
    assert l1.decision_id == DECISION


def test_mapping_fold_never_goes_back_to_a_lower_revision() -> None:
    rows = listing_mappings.fold([mapped(4, "L1", 2, "i2", 3), mapped(2, "L1", 1, "i1", 1)])
    assert rows[("t1", "c1", "listing_mapping", "L1")].revision == 2


def test_policy_fold_keeps_every_version_once() -> None:
    v1, v2 = versioned(1, "std", 1), versioned(2, "std", 2, scope="AT")
    rows = shipping_policies.fold([v1, mapped(3, "L1", 1, "i1", 1), v2, v1])
    assert sorted(v for _, v in rows) == [1, 2]
    second = rows[(("t1", "c1", "shipping_policy", "std"), 2)]
    assert second.scope == "AT" and second.terms == {"carrier": "dhl"}
    assert second.effective_from == T0 + timedelta(days=60)
    assert second.effective_to == T0 + timedelta(days=90)
    assert second.position == 2


def test_a_decision_is_applied_alone_and_has_no_projection() -> None:
    decision = decided(1)
    plan = plan_batch([decision], {}, [], lambda keys: ([], {}))
    assert plan.outcomes == {decision.event_id: APPLIED}
    assert all(p.aggregate != "decision" for p in registry.PROJECTIONS)


def test_a_mapping_parks_until_exactly_its_item_revision_is_applied() -> None:
    mapping = mapped(3, "L1", 1, "i1", 2)
    key = ("t1", "c1", "catalog_item", "i1")
    assert plan_batch([mapping], {key: 1}, [], lambda keys: ([], {})).outcomes == {
        mapping.event_id: PARKED
    }
    assert plan_batch([mapping], {key: 2}, [], lambda keys: ([], {})).outcomes == {
        mapping.event_id: APPLIED
    }


def test_an_earlier_policy_version_is_stale_only_within_the_unbroken_run() -> None:
    # load_revisions reports the unbroken run 1..n, so with only version 2 stored the
    # planner sees 0 and still applies version 1; with 1..2 stored it is stale.
    v1 = versioned(1, "std", 1)
    key = ("t1", "c1", "shipping_policy", "std")
    assert plan_batch([v1], {}, [], lambda keys: ([], {})).outcomes[v1.event_id] == APPLIED
    assert (
        plan_batch([v1], {key: 2}, [], lambda keys: ([], {})).outcomes[v1.event_id] == IGNORED_STALE
    )


def split(position: int, split_id: uuid.UUID, source: str, *successors: str) -> Envelope:
    return event(
        position,
        ref("item_split", str(split_id), 1),
        CatalogItemSplit(
            source_item_id=source,
            source_revision=2,
            successor_item_ids=successors,
            remaps={"L1": successors[0]},
            decision_id=DECISION,
        ),
        ref("catalog_item", source, 2),
        *(ref("catalog_item", s, 1) for s in successors),
    )


def test_split_fold_keeps_one_row_per_split_with_its_successors() -> None:
    first, second = uuid.uuid4(), uuid.uuid4()
    events = [split(3, first, "i1", "i1-a", "i1-b"), upserted(4, "i2", 1)]
    events += [split(5, second, "i2", "i2-a"), split(3, first, "i1", "i1-a", "i1-b")]
    rows = item_splits.fold(events)
    assert sorted(rows) == sorted(
        [("t1", "c1", "item_split", str(first)), ("t1", "c1", "item_split", str(second))]
    )
    row = rows[("t1", "c1", "item_split", str(first))]
    assert (row.split_id, row.source_item_id, row.source_revision) == (first, "i1", 2)
    assert (row.successor_item_ids, row.remaps) == (("i1-a", "i1-b"), {"L1": "i1-a"})
    assert (row.decision_id, row.revision, row.position) == (DECISION, 1, 3)


def test_a_splits_successors_are_kept_in_code_point_order_as_an_export_lists_them() -> None:
    """The decision may name them in any order; the row is the same either way, and
    the same as a rebuild's load writes from an export (``ORDER BY … COLLATE "C"``)."""
    split_id = uuid.uuid4()
    given = split(3, split_id, "p53", "p53-s99", "p53-s100", "p53-É", "p53-e")
    row = item_splits.fold([given])[("t1", "c1", "item_split", str(split_id))]
    assert row.successor_item_ids == ("p53-e", "p53-s100", "p53-s99", "p53-É")


def test_a_split_parks_until_its_source_and_every_successor_are_applied() -> None:
    event_ = split(6, uuid.uuid4(), "i1", "i1-a", "i1-b")
    applied = {("t1", "c1", "catalog_item", "i1"): 2, ("t1", "c1", "catalog_item", "i1-a"): 1}
    assert plan_batch([event_], applied, [], lambda keys: ([], {})).outcomes == {
        event_.event_id: PARKED
    }
    applied[("t1", "c1", "catalog_item", "i1-b")] = 1
    assert plan_batch([event_], applied, [], lambda keys: ([], {})).outcomes == {
        event_.event_id: APPLIED
    }
    assert any(p.aggregate == "item_split" for p in registry.PROJECTIONS)
