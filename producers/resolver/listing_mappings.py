"""Listing mappings (INV-01): a listing maps onto an item that is active right now."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from db.repositories import catalog_items as items
from db.repositories import listing_mappings as mappings
from db.stream_writer import PendingEvent
from db.unit_of_work import UnitOfWork
from producers.resolver.exceptions import TargetNotActive
from producers.resolver.facts import DecisionScope
from schemas.events import AggregateRef, ListingMapped

AGGREGATE = "listing_mapping"
ITEM = "catalog_item"


@dataclass(frozen=True, slots=True)
class MapListing:
    """Accept that ``listing_id`` is an offer of catalog item ``item_id``."""

    listing_id: str
    item_id: str

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        map_listing(uow, scope.tenant_id, scope.catalog_id, scope.decision_id, self)


def map_listing(
    uow: UnitOfWork, tenant_id: str, catalog_id: str, decision_id: uuid.UUID, fact: MapListing
) -> int:
    """Write the mapping's next revision; returns it. Part of ``record_decision``.

    1. share-lock the target item and require it active: FOR SHARE conflicts with the
       FOR UPDATE/UPDATE of a writer retiring or splitting it, so the item cannot
       leave 'active' until this transaction ends, whoever else writes it;
    2. write the mapping naming the item revision it saw;
    3. queue the event, depending on exactly that item revision.
    """
    writer = uow.stream(tenant_id, catalog_id)
    target = items.get_for_share(uow.tx, tenant_id, catalog_id, fact.item_id)
    if target is None or target.status != "active":
        state = "does not exist" if target is None else f"is {target.status}"
        raise TargetNotActive(
            f"listing {fact.listing_id!r} cannot map to item {fact.item_id!r} of "
            f"{tenant_id}/{catalog_id}: it {state}"
        )
    revision = mappings.save(
        uow.tx, tenant_id, catalog_id, fact.listing_id, target.item_id, target.revision, decision_id
    )
    writer.append(
        mapped_event(fact.listing_id, revision, target.item_id, target.revision, decision_id)
    )
    return revision


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
