"""Which facts of a decision are accepted together (``fact_runs``), pure."""

from __future__ import annotations

from dataclasses import dataclass

from db.unit_of_work import UnitOfWork
from producers.resolver.catalog_items import ItemChange, RetireItem
from producers.resolver.facts import DecisionScope, Fact, fact_runs
from producers.resolver.listing_mappings import MapListing


@dataclass(frozen=True)
class Opaque:
    """A fact type that is not set-based."""

    name: str

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        raise AssertionError("not called")


def item(item_id: str, parent: str | None = None) -> ItemChange:
    return ItemChange("t", "c", item_id, "shoe", item_id, parent)


def shape(runs: list[list[Fact]]) -> list[int]:
    return [len(run) for run in runs]


def test_consecutive_independent_facts_of_one_type_form_one_run() -> None:
    facts: list[Fact] = [item(f"i{k}") for k in range(100)]
    assert shape(fact_runs(facts)) == [100]


def test_a_change_of_type_starts_a_new_run_and_order_is_kept() -> None:
    facts: list[Fact] = [
        item("a"),
        item("b"),
        MapListing("L1", "a"),
        MapListing("L2", "b"),
        RetireItem("c", "gone"),
        Opaque("x"),
        Opaque("y"),
        item("d"),
    ]
    runs = fact_runs(facts)
    assert shape(runs) == [2, 2, 1, 1, 1, 1]
    assert [f for run in runs for f in run] == facts


def test_a_fact_relying_on_one_written_earlier_in_the_run_starts_a_new_run() -> None:
    # The child needs its parent's row; the same item twice needs the first revision.
    assert shape(fact_runs([item("p"), item("q"), item("child", "p"), item("r")])) == [2, 2]
    assert shape(fact_runs([item("a"), item("b"), item("a")])) == [2, 1]
    assert shape(fact_runs([MapListing("L1", "a"), MapListing("L1", "b")])) == [1, 1]
    assert shape(fact_runs([RetireItem("a", "x"), RetireItem("a", "y")])) == [1, 1]


def test_reading_what_an_earlier_fact_only_read_keeps_the_run() -> None:
    # Two listings onto one item, two children of one existing parent.
    assert shape(fact_runs([MapListing("L1", "a"), MapListing("L2", "a")])) == [2]
    assert shape(fact_runs([item("x", "p"), item("y", "p")])) == [2]
    # An item written after another fact of the run only read it: the read saw it first.
    assert shape(fact_runs([item("x", "p"), item("p")])) == [2]


def test_opaque_facts_are_never_grouped() -> None:
    assert shape(fact_runs([Opaque("a"), Opaque("b")])) == [1, 1]
    assert fact_runs([]) == []
