"""plan_batch: each new event's outcome, parking and release, with no database."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import UTC, datetime

from processors.applier.plan import (
    APPLIED,
    IGNORED_STALE,
    PARKED,
    Parked,
    plan_batch,
)
from schemas.events import AggregateRef, CatalogItemRetired, CatalogItemUpserted, Envelope
from schemas.ids import AggregateKey

TENANT, CATALOG = "t1", "c1"
ITEM = "catalog_item"


def key(item: str) -> AggregateKey:
    return (TENANT, CATALOG, ITEM, item)


def on(item: str, revision: int) -> AggregateRef:
    return AggregateRef(type=ITEM, id=item, revision=revision)


def upsert(item: str, revision: int, position: int, *deps: AggregateRef) -> Envelope:
    return Envelope(
        tenant_id=TENANT,
        catalog_id=CATALOG,
        history_epoch=1,
        position=position,
        event_id=uuid.uuid4(),
        aggregate=on(item, revision),
        dependencies=deps,
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        payload=CatalogItemUpserted(class_id="lamp", status="active", title=f"{item} r{revision}"),
    )


def retire(item: str, revision: int, position: int) -> Envelope:
    return Envelope(
        tenant_id=TENANT,
        catalog_id=CATALOG,
        history_epoch=1,
        position=position,
        event_id=uuid.uuid4(),
        aggregate=on(item, revision),
        dependencies=(on(item, revision - 1),),
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        payload=CatalogItemRetired(reason="gone"),
    )


def stored(*events: Envelope) -> list[Parked]:
    return [Parked(e, b"encoded") for e in events]


class StoredParking:
    """A fake loader over parked events "in the database", recording what it was asked."""

    def __init__(self, parked: Iterable[Envelope], revisions: dict[AggregateKey, int]) -> None:
        self.parked = list(parked)
        self.revisions = revisions
        self.calls: list[list[AggregateKey]] = []

    def __call__(self, keys: list[AggregateKey]) -> tuple[list[Parked], dict[AggregateKey, int]]:
        self.calls.append(list(keys))
        found = [e for e in self.parked if any(key(d.id) in keys for d in e.dependencies)]
        named = {key(e.aggregate.id) for e in found} | {
            key(d.id) for e in found for d in e.dependencies
        }
        return stored(*found), {k: r for k, r in self.revisions.items() if k in named}


def no_more_parked(keys: list[AggregateKey]) -> tuple[list[Parked], dict[AggregateKey, int]]:
    return [], {}


def test_an_event_at_or_below_the_applied_revision_is_ignored_as_stale() -> None:
    older, same, newer = upsert("a", 2, 5), upsert("a", 3, 6), upsert("a", 4, 7)
    revisions = {key("a"): 3}

    plan = plan_batch([older, same, newer], revisions, [], no_more_parked)

    assert plan.outcomes == {
        older.event_id: IGNORED_STALE,
        same.event_id: IGNORED_STALE,
        newer.event_id: APPLIED,
    }
    assert plan.to_apply == [newer]
    assert revisions[key("a")] == 4


def test_a_revision_skipped_over_by_a_full_state_upsert_is_stale_when_it_arrives() -> None:
    # Revision 3 arrives before revision 2: an upsert is full state and needs nothing.
    jump, late = upsert("a", 3, 3), upsert("a", 2, 2)

    first = plan_batch([jump], {key("a"): 1}, [], no_more_parked)
    second = plan_batch([late], {key("a"): 3}, [], no_more_parked)

    assert first.outcomes == {jump.event_id: APPLIED}
    assert second.outcomes == {late.event_id: IGNORED_STALE}
    assert second.to_apply == []


def test_an_event_is_parked_with_exactly_the_dependencies_it_misses() -> None:
    child = upsert("child", 1, 4, on("parent", 2), on("other", 1))

    plan = plan_batch([child], {key("parent"): 1, key("other"): 1}, [], no_more_parked)

    assert plan.outcomes == {child.event_id: PARKED}
    assert plan.to_park == [(child, (on("parent", 2),))]
    assert plan.to_apply == []


def test_a_dependency_later_in_the_batch_releases_the_event_parked_in_it() -> None:
    # Positions are out of dependency order on purpose: the planner must not rely on
    # a dependency sorting first, only on applying what it waits for.
    child = upsert("child", 1, 1, on("parent", 1))
    parent = upsert("parent", 1, 2)

    plan = plan_batch([parent, child], {}, [], no_more_parked)

    assert plan.outcomes == {child.event_id: APPLIED, parent.event_id: APPLIED}
    assert plan.to_apply == [parent, child]
    assert plan.to_park == []
    assert plan.released == {}


def test_a_stored_parked_event_is_released_when_its_dependency_applies() -> None:
    child = upsert("child", 1, 2, on("parent", 1))
    parent = upsert("parent", 1, 1)

    plan = plan_batch([parent], {}, stored(child), no_more_parked)

    assert plan.outcomes == {parent.event_id: APPLIED}
    assert plan.released == {child.event_id: APPLIED}
    assert plan.to_apply == [parent, child]


def test_a_released_event_already_superseded_is_released_as_stale() -> None:
    # The retirement of revision 2 waits for revision 1; revision 3 (full state) lands
    # first, so the retirement no longer has anything to say.
    retirement = retire("a", 2, 2)
    newer = upsert("a", 3, 3)

    plan = plan_batch([newer], {}, stored(retirement), no_more_parked)

    assert plan.released == {retirement.event_id: IGNORED_STALE}
    assert plan.to_apply == [newer]


def test_a_release_cascades_through_stored_parked_events_via_the_loader() -> None:
    parent = upsert("parent", 1, 1)
    child = upsert("child", 1, 2, on("parent", 1))
    grandchild = upsert("grandchild", 1, 3, on("child", 1))
    great = upsert("great", 1, 4, on("grandchild", 1))
    # The applier hands over the parked events waiting on the batch's own aggregates;
    # everything further down the chain must come through the loader.
    loader = StoredParking([child, grandchild, great], {})

    plan = plan_batch([parent], {}, stored(child), loader)

    assert plan.outcomes == {parent.event_id: APPLIED}
    assert plan.released == {
        child.event_id: APPLIED,
        grandchild.event_id: APPLIED,
        great.event_id: APPLIED,
    }
    assert plan.to_apply == [parent, child, grandchild, great]
    assert [key("child")] in loader.calls
    assert [key("grandchild")] in loader.calls
    assert [key("parent")] not in loader.calls  # handed over by the caller already


def test_a_cascade_stops_at_an_event_that_still_misses_another_dependency() -> None:
    parent = upsert("parent", 1, 1)
    child = upsert("child", 1, 2, on("parent", 1))
    waits_on_two = upsert("x", 1, 4, on("child", 1), on("absent", 1))
    loader = StoredParking([child, waits_on_two], {})

    plan = plan_batch([parent], {}, stored(child), loader)

    assert plan.released == {child.event_id: APPLIED}
    assert plan.to_apply == [parent, child]


def test_the_loader_supplies_the_stored_revisions_of_what_cascaded_events_name() -> None:
    # The grandchild also needs "other" at revision 2, which only the database knows.
    parent = upsert("parent", 1, 1)
    child = upsert("child", 1, 2, on("parent", 1))
    grandchild = upsert("grandchild", 1, 5, on("child", 1), on("other", 2))
    loader = StoredParking([child, grandchild], {key("other"): 2})

    plan = plan_batch([parent], {}, stored(child), loader)

    assert plan.released == {child.event_id: APPLIED, grandchild.event_id: APPLIED}
    assert plan.to_apply == [parent, child, grandchild]


def test_a_stored_event_waiting_on_two_dependencies_is_applied_exactly_once() -> None:
    first, second = upsert("a", 1, 1), upsert("b", 1, 2)
    both = upsert("c", 1, 3, on("a", 1), on("b", 1))

    plan = plan_batch([first, second], {}, stored(both), no_more_parked)

    assert plan.released == {both.event_id: APPLIED}
    assert plan.to_apply == [first, second, both]


def test_a_stored_event_waiting_on_two_dependencies_stays_parked_with_one_applied() -> None:
    first = upsert("a", 1, 1)
    both = upsert("c", 1, 3, on("a", 1), on("b", 1))

    plan = plan_batch([first], {}, stored(both), no_more_parked)

    assert plan.released == {}
    assert plan.to_apply == [first]


def test_a_new_event_waiting_on_two_dependencies_in_the_batch_is_applied_exactly_once() -> None:
    both = upsert("c", 1, 1, on("a", 1), on("b", 1))
    first, second = upsert("a", 1, 2), upsert("b", 1, 3)

    plan = plan_batch([second, both, first], {}, [], no_more_parked)

    assert plan.outcomes == {
        both.event_id: APPLIED,
        first.event_id: APPLIED,
        second.event_id: APPLIED,
    }
    assert plan.to_apply == [first, second, both]
    assert plan.to_park == []


def test_every_new_event_gets_exactly_one_outcome() -> None:
    applied = upsert("a", 2, 10)
    stale = upsert("b", 1, 11)
    parked = upsert("c", 1, 12, on("missing", 1))
    retired = retire("a", 3, 13)  # waits for revision 2, applied just before
    released_here = upsert("d", 1, 9, on("e", 1))
    releaser = upsert("e", 1, 14)
    new = [applied, stale, parked, retired, released_here, releaser]

    plan = plan_batch(new, {key("a"): 1, key("b"): 1}, [], no_more_parked)

    assert plan.outcomes == {
        applied.event_id: APPLIED,
        stale.event_id: IGNORED_STALE,
        parked.event_id: PARKED,
        retired.event_id: APPLIED,
        released_here.event_id: APPLIED,
        releaser.event_id: APPLIED,
    }
    assert plan.to_park == [(parked, (on("missing", 1),))]
    assert plan.to_apply == [applied, retired, releaser, released_here]
    assert plan.released == {}


def test_a_stored_parked_event_of_a_superseded_epoch_is_ignored_not_applied() -> None:
    """A new epoch's event names the same aggregate and revision an old epoch's
    parked event waits on: the old one is never applied, it ends ignored_old_epoch."""
    from dataclasses import replace

    from processors.applier.plan import IGNORED_OLD_EPOCH

    old_child = upsert("child", 1, 2, on("p", 1))
    new_parent = replace(upsert("p", 1, 1), history_epoch=2)
    plan = plan_batch(
        [new_parent],
        {},
        stored(old_child),
        no_more_parked,
        superseded_epoch=lambda e: e.history_epoch < 2,
    )
    assert plan.outcomes == {new_parent.event_id: APPLIED}
    assert plan.released == {old_child.event_id: IGNORED_OLD_EPOCH}
    assert [e.event_id for e in plan.to_apply] == [new_parent.event_id]
