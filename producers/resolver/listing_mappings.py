"""Listing mappings (INV-01): a listing maps onto an item that is active right now."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from db.repositories import catalog_items as items
from db.repositories import listing_mappings as mappings
from db.repositories.listing_mappings import MappingWrite
from db.stream_writer import PendingEvent
from db.unit_of_work import UnitOfWork
from producers.resolver.exceptions import TargetNotActive
from producers.resolver.facts import DecisionScope, Footprint
from schemas.events import AggregateRef, ListingMapped

AGGREGATE = "listing_mapping"
ITEM = "catalog_item"


@dataclass(frozen=True, slots=True)
class MapListing:
    """Accept that ``listing_id`` is an offer of catalog item ``item_id``."""

    listing_id: str
    item_id: str

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        map_listings(uow, scope, [self])

    def footprint(self) -> Footprint:
        return Footprint(
            frozenset({(AGGREGATE, self.listing_id)}), frozenset({(ITEM, self.item_id)})
        )

    @classmethod
    def accept_all(cls, uow: UnitOfWork, scope: DecisionScope, facts: Sequence[MapListing]) -> None:
        map_listings(uow, scope, facts)


def map_listing(
    uow: UnitOfWork, tenant_id: str, catalog_id: str, decision_id: uuid.UUID, fact: MapListing
) -> int:
    """Write one mapping's next revision (``map_listings``); returns it."""
    return map_listings(uow, DecisionScope(tenant_id, catalog_id, decision_id), [fact])[0]


def map_listings(uow: UnitOfWork, scope: DecisionScope, facts: Sequence[MapListing]) -> list[int]:
    """Write each mapping's next revision (distinct listings); returns them in order.
    Part of ``record_decision``; one statement per step for all the mappings.

    1. share-lock the target items (in key order) and require each active, in order:
       FOR SHARE conflicts with the FOR UPDATE/UPDATE of a writer retiring or
       splitting one, so it cannot leave 'active' until this transaction ends,
       whoever else writes it;
    2. write the mappings, each naming the item revision it saw;
    3. queue the events in order, each depending on exactly that item revision.
    """
    t, c = scope.tenant_id, scope.catalog_id
    writer = uow.stream(t, c)
    targets = items.get_many_for_share(uow.tx, t, c, [f.item_id for f in facts])
    writes: list[MappingWrite] = []
    for fact in facts:
        target = targets.get(fact.item_id)
        if target is None or target.status != "active":
            state = "does not exist" if target is None else f"is {target.status}"
            raise TargetNotActive(
                f"listing {fact.listing_id!r} cannot map to item {fact.item_id!r} of "
                f"{t}/{c}: it {state}"
            )
        writes.append(MappingWrite(fact.listing_id, target.item_id, target.revision))
    revisions = mappings.save_many(uow.tx, t, c, writes, scope.decision_id)
    saved: list[int] = []
    for write in writes:
        revision = revisions[write.listing_id]
        saved.append(revision)
        writer.append(
            mapped_event(
                write.listing_id, revision, write.item_id, write.item_revision, scope.decision_id
            )
        )
    return saved


def mapped_event(
    listing_id: str, revision: int, item_id: str, item_revision: int, decision_id: uuid.UUID
) -> PendingEvent:
    return PendingEvent(
        aggregate=AggregateRef(type=AGGREGATE, id=listing_id, revision=revision),
        dependencies=(AggregateRef(type=ITEM, id=item_id, revision=item_revision),),
        payload=ListingMapped(
            item_id=item_id, item_revision=item_revision, decision_id=decision_id
        ),
    )
