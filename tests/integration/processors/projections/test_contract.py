"""The contract every registered projection keeps, against the real product database.

One suite, run for each projection in ``registry.PROJECTIONS`` with the events its
builder makes (``builders.py``; a projection without a builder fails here):

* a lower revision never overwrites a higher one, and the revision read back is the
  higher one;
* applying the same event again changes nothing, not even ``updated_at``;
* an aggregate id of the wrong shape (or one never written) reads as absent, and
  does not disturb the other keys of the same probe;
* a generation never sees another generation's rows, and writing one never changes
  another's (the shadow rebuild loads new generations through this path);
* whatever the order and batching of an aggregate's revisions, the rows end up as
  applying them in revision order leaves them.

The projections are called as the applier calls them, each batch in a transaction of
its own. Within a batch the applier hands a projection each aggregate's events in
rising revision (the planner drops the rest as stale); across batches, anything the
planner lets through must still leave the rows right. Tests isolate themselves by
generation, so Hypothesis examples need no truncation between them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.rows import dict_row

from db.settings import DatabaseSettings
from db.tables.product import metadata
from processors.projections import registry
from processors.projections.registry import Projection
from schemas.events import Envelope
from tests.integration.processors.projections.builders import BUILDERS, Builder

TENANT, CATALOG = "t1", "c1"
_generations = itertools.count(1000)


@dataclass(frozen=True, slots=True)
class Case:
    projection: Projection
    builder: Builder
    conn: psycopg.Connection[Any]

    def apply(self, generation: int, events: Iterable[Envelope]) -> None:
        with self.conn.transaction():
            self.projection.apply(self.conn, generation, list(events))

    def revisions(self, generation: int, ids: Iterable[str]) -> dict[str, int]:
        keys = [(TENANT, CATALOG, self.projection.aggregate, i) for i in ids]
        with self.conn.transaction():
            found = self.projection.load_revisions(self.conn, generation, keys)
        assert {k[:3] for k in found} <= {(TENANT, CATALOG, self.projection.aggregate)}
        return {k[3]: r for k, r in found.items()}

    def rows(self, generation: int, *, updated_at: bool = False) -> list[dict[str, Any]]:
        """The generation's rows in key order, without the generation (and, unless
        asked, without ``updated_at``, which says when rather than what)."""
        table = metadata.tables[self.builder.table]
        order = ", ".join(c.name for c in table.primary_key.columns)
        with self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(
                f"SELECT * FROM {table.name} WHERE generation = %s ORDER BY {order}",
                (generation,),
            )
            rows = cur.fetchall()
        dropped = {"generation"} if updated_at else {"generation", "updated_at"}
        return [{k: v for k, v in r.items() if k not in dropped} for r in rows]

    def in_order(self, revisions: dict[str, int]) -> list[dict[str, Any]]:
        """The rows of a fresh generation that got each id's revisions 1..n in order,
        one batch per revision."""
        generation = next(_generations)
        for aggregate_id, last in revisions.items():
            for revision in range(1, last + 1):
                self.apply(generation, [self.builder.event(aggregate_id, revision)])
        return self.rows(generation)


@pytest.fixture(params=[p.aggregate for p in registry.PROJECTIONS])
def case(request: pytest.FixtureRequest, clean_db: DatabaseSettings) -> Iterator[Case]:
    projection = next(p for p in registry.PROJECTIONS if p.aggregate == request.param)
    builder = BUILDERS[projection.aggregate]  # no builder, no pass
    with psycopg.connect(clean_db.product_dsn, autocommit=True) as conn:
        yield Case(projection, builder, conn)


def test_every_registered_projection_has_a_builder() -> None:
    assert sorted(BUILDERS) == sorted(p.aggregate for p in registry.PROJECTIONS)


def test_a_lower_revision_never_overwrites_a_higher_one(case: Case) -> None:
    one, _ = case.builder.ids
    generation = next(_generations)
    case.apply(generation, [case.builder.event(one, 2)])
    stored = case.rows(generation, updated_at=True)
    assert stored

    case.apply(generation, [case.builder.event(one, 1)])

    after = case.rows(generation, updated_at=True)
    assert all(row in after for row in stored)  # nothing stored moved
    assert case.revisions(generation, [one]) == {one: 2}
    assert case.rows(generation) == case.in_order({one: 2})


def test_a_lower_revision_in_a_later_batch_of_several_aggregates_changes_nothing(
    case: Case,
) -> None:
    one, two = case.builder.ids
    generation = next(_generations)
    events = [case.builder.event(i, r) for i in (one, two) for r in (1, 2, 3)]
    case.apply(generation, events)
    stored = case.rows(generation, updated_at=True)

    case.apply(generation, [case.builder.event(two, 2), case.builder.event(one, 1)])

    assert case.rows(generation, updated_at=True) == stored
    assert case.revisions(generation, [one, two]) == {one: 3, two: 3}


def test_applying_the_same_event_again_changes_nothing(case: Case) -> None:
    one, _ = case.builder.ids
    generation = next(_generations)
    first, second = case.builder.event(one, 1), case.builder.event(one, 2)
    case.apply(generation, [first])
    case.apply(generation, [second])
    stored = case.rows(generation, updated_at=True)

    case.apply(generation, [second])  # redelivered: a later transaction, a later now()
    case.apply(generation, [second, second])  # and twice in one batch
    case.apply(generation, [first])

    assert case.rows(generation, updated_at=True) == stored
    assert case.revisions(generation, [one]) == {one: 2}


def test_an_id_of_the_wrong_shape_or_never_written_reads_as_absent(case: Case) -> None:
    one, two = case.builder.ids
    generation = next(_generations)
    case.apply(generation, [case.builder.event(one, 1), case.builder.event(two, 1)])
    probed = [*case.builder.wrong_shape, case.builder.unknown, one, two]

    assert case.revisions(generation, probed) == {one: 1, two: 1}
    assert case.revisions(generation, case.builder.wrong_shape) == {}


def test_a_generation_never_sees_another_generations_rows(case: Case) -> None:
    one, two = case.builder.ids
    first, second, empty = next(_generations), next(_generations), next(_generations)
    case.apply(first, [case.builder.event(one, 1)])
    rows_of_first = case.rows(first, updated_at=True)

    case.apply(second, [case.builder.event(one, r) for r in (1, 2)])
    case.apply(second, [case.builder.event(two, 1)])

    assert case.rows(first, updated_at=True) == rows_of_first
    assert case.revisions(first, [one, two]) == {one: 1}
    assert case.revisions(second, [one, two]) == {one: 2, two: 1}
    assert case.revisions(empty, [one, two]) == {}

    rows_of_second = case.rows(second, updated_at=True)
    case.apply(first, [case.builder.event(one, r) for r in (2, 3)])

    assert case.rows(second, updated_at=True) == rows_of_second
    assert case.revisions(first, [one, two]) == {one: 3}
    assert case.revisions(second, [one, two]) == {one: 2, two: 1}
    assert case.rows(first) == case.in_order({one: 3})


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[dict[int, int], list[list[tuple[int, int]]]]:
    """Revisions 1..n of two aggregates (by index), each delivered at least once and
    some again, in any order and cut into batches; within a batch, each aggregate's
    events in rising revision, as the planner hands them over."""
    last = {0: draw(st.integers(1, 4)), 1: draw(st.integers(0, 3))}
    every = [(a, r) for a, n in last.items() for r in range(1, n + 1)]
    again = draw(st.lists(st.sampled_from(every), max_size=4))
    order = draw(st.permutations(every + again))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(order) - 1)), max_size=3)))
    batches = [order[i:j] for i, j in itertools.pairwise([0, *cuts, len(order)])]
    return last, [sorted(set(b)) for b in batches if b]


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(delivered=deliveries())
def test_any_order_and_batching_leaves_the_rows_of_revision_order(
    case: Case, delivered: tuple[dict[int, int], list[list[tuple[int, int]]]]
) -> None:
    last, batches = delivered
    ids = case.builder.ids
    generation = next(_generations)
    for batch in batches:
        case.apply(generation, [case.builder.event(ids[a], r) for a, r in batch])

    written = {ids[a]: n for a, n in last.items() if n}
    assert case.revisions(generation, ids) == written
    assert case.rows(generation) == case.in_order(written)
