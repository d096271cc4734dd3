"""The retention rules as plain functions."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from producers.retention.rules import (
    Holder,
    PruneStep,
    consumer_holder,
    lease_holder,
    limit_by_age,
    prune_step,
    retention_floor,
)

positions = st.integers(0, 1000)
holders = st.lists(
    st.builds(Holder, st.sampled_from(["consumer", "lease"]), st.text(max_size=5), positions)
)


def test_a_consumer_that_never_reported_holds_the_floor_at_zero() -> None:
    assert consumer_holder("late", None).position == 0
    floor = retention_floor([consumer_holder("a", 90), consumer_holder("late", None)])
    assert floor == Holder("consumer", "late", 0)


def test_the_lowest_holder_is_the_floor_and_names_itself() -> None:
    floor = retention_floor([consumer_holder("a", 90), lease_holder("L1", "rebuild", 40)])
    assert floor is not None
    assert (floor.kind, floor.position) == ("lease", 40)
    assert "L1 (rebuild)" in str(floor)


def test_no_holder_no_floor() -> None:
    assert retention_floor([]) is None


def test_a_step_stops_at_the_lowest_limit() -> None:
    assert prune_step(10, consumer_holder("a", 30), 50, 100) == PruneStep(30, "consumer 'a' at 30")
    assert prune_step(10, consumer_holder("a", 80), 50, 100).limited_by == "publication"
    assert prune_step(10, None, 50, 5) == PruneStep(15, "batch size")


def test_a_floor_below_what_is_pruned_prunes_nothing() -> None:
    assert prune_step(40, consumer_holder("late", None), 90, 10).through == 40


def test_the_retention_age_cuts_the_step_before_the_first_young_row() -> None:
    step = PruneStep(30, "publication")
    assert limit_by_age(step, 21) == PruneStep(20, "retention age")
    assert limit_by_age(step, None) == step
    assert limit_by_age(step, 31) == step


@given(
    pruned=positions,
    found=holders,
    published=positions,
    batch=st.integers(1, 50),
    young=st.none() | positions,
)
def test_a_step_never_passes_any_limit_nor_goes_back(
    pruned: int, found: list[Holder], published: int, batch: int, young: int | None
) -> None:
    floor = retention_floor(found)
    step = prune_step(pruned, floor, published, batch)
    if young is not None and young <= pruned:
        young = None  # rows at or below pruned_through no longer exist
    step = limit_by_age(step, young)
    assert step.through >= pruned
    if step.through > pruned:
        assert step.through <= published
        assert step.through <= pruned + batch
        assert all(step.through <= h.position for h in found)
        assert young is None or step.through < young
