"""What a decision accepts: the ``Fact`` protocol every accepted-fact type follows.

A fact (a listing mapping, a policy version, a split, …) knows how to apply itself
inside ``record_decision``'s transaction: take its locks, check its invariants, write
its rows with ``revision + 1`` naming the decision, and queue one event per aggregate
revision it changes. ``record_decision`` never needs to know the concrete types, so a
new kind of fact lives in its own module and needs no change here or there.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Protocol

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
