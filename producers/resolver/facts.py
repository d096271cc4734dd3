"""What a decision accepts: the ``Fact`` protocol every accepted-fact type follows.

A fact (a listing mapping, a policy version, a split, …) knows how to apply itself
inside ``record_decision``'s transaction: take its locks, check its invariants, write
its rows with ``revision + 1`` naming the decision, and queue one event per aggregate
revision it changes. ``record_decision`` never needs to know the concrete types, so a
new kind of fact lives in its own module and needs no change here or there.

A fact type that a decision can carry many of (items, retirements, listing mappings)
is also a ``SetFact``: the facts of such a type that follow each other in a decision
are accepted together, one statement per step for all of them rather than per fact,
with exactly the outcome of accepting them one by one (the same rows, revisions,
events in the same order, and the same first error). ``fact_runs`` decides which
facts may be taken together: only independent ones, so that no fact of a run reads
or writes what an earlier fact of the same run writes.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, Self, cast

from db.unit_of_work import UnitOfWork


@dataclass(frozen=True, slots=True)
class DecisionScope:
    """The decision a fact is accepted under, and the stream it is written to."""

    tenant_id: str
    catalog_id: str
    decision_id: uuid.UUID


class Fact(Protocol):
    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        """Apply the fact in ``uow`` (never commits); raise a ``DomainError`` to refuse."""
        ...


AggregateName = tuple[str, str]
"""(aggregate type, aggregate id)."""


@dataclass(frozen=True, slots=True)
class Footprint:
    """The aggregates a fact reads (and relies on) and those it writes."""

    writes: frozenset[AggregateName]
    reads: frozenset[AggregateName] = field(default_factory=frozenset)


class SetFact(Protocol):
    """A fact type whose independent facts of one decision are accepted together."""

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None: ...

    def footprint(self) -> Footprint: ...

    @classmethod
    def accept_all(cls, uow: UnitOfWork, scope: DecisionScope, facts: Sequence[Self]) -> None:
        """Accept ``facts`` (all of this type, independent, in decision order) as if one
        by one: the same rows, events in the same order, the first fact's error first."""
        ...


@functools.cache
def _set_based(kind: type) -> bool:
    """Whether facts of ``kind`` are ``SetFact``s (cached: a Protocol's isinstance
    walks its members each time, which costs more than a decision's other Python)."""
    return callable(getattr(kind, "accept_all", None)) and callable(
        getattr(kind, "footprint", None)
    )


def fact_runs(facts: Sequence[Fact]) -> list[list[Fact]]:
    """Cut a decision's facts, in order, into runs accepted together (pure).

    A run is either one fact, or consecutive ``SetFact`` facts of one type of which
    none reads or writes an aggregate an earlier fact of the run writes (an item and
    its child created in one decision, or one item changed twice, fall in separate
    runs: the later one must see the earlier one's row).
    """
    runs: list[list[Fact]] = []
    written: set[AggregateName] = set()
    for fact in facts:
        last = runs[-1] if runs else None
        if _set_based(type(fact)):
            foot = cast(SetFact, fact).footprint()
            if (
                last is not None
                and type(last[0]) is type(fact)
                and not written & (foot.writes | foot.reads)
            ):
                last.append(fact)
                written |= foot.writes
                continue
            runs.append([fact])
            written = set(foot.writes)
            continue
        runs.append([fact])
        written = set()
    return runs


def accept_run(uow: UnitOfWork, scope: DecisionScope, run: Sequence[Fact]) -> None:
    """Accept one run of ``fact_runs``."""
    first = run[0]
    if len(run) > 1 and _set_based(type(first)):
        cast(SetFact, first).accept_all(uow, scope, cast(Sequence[SetFact], run))
        return
    first.accept(uow, scope)
