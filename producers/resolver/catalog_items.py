"""Accepted catalog-item changes: the domain rules and the events they produce.

Both are facts a ``Decision`` accepts (``record_decision``); each item revision names
the decision that accepted it (INV-05).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from db.repositories import catalog_items as items
from db.repositories import identity as identity_keys
from db.stream_writer import PendingEvent
from db.unit_of_work import UnitOfWork
from producers.resolver.attributes.class_changes import refuse_class_change
from producers.resolver.exceptions import (
    InvalidDecision,
    ItemNotFound,
    ItemWasSplit,
    ParentNotActive,
)
from producers.resolver.facts import DecisionScope
from schemas.events import AggregateRef, CatalogItemRetired, CatalogItemUpserted

AGGREGATE = "catalog_item"


@dataclass(frozen=True, slots=True)
class ItemChange:
    tenant_id: str
    catalog_id: str
    item_id: str
    class_id: str
    title: str
    parent_item_id: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        if (self.tenant_id, self.catalog_id) != (scope.tenant_id, scope.catalog_id):
            raise InvalidDecision(
                f"item {self.item_id!r} belongs to {self.tenant_id}/{self.catalog_id}, "
                f"not to the decision's {scope.tenant_id}/{scope.catalog_id}"
            )
        # INV-07: an item whose values rely on its class keeps a class they apply to.
        refuse_class_change(uow, self.tenant_id, self.catalog_id, self.item_id, self.class_id)
        record_item(uow, self, scope.decision_id)


@dataclass(frozen=True, slots=True)
class RetireItem:
    """Accept that ``item_id`` is no longer offered (it is never deleted)."""

    item_id: str
    reason: str

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        retire_item(
            uow, scope.tenant_id, scope.catalog_id, self.item_id, self.reason, scope.decision_id
        )


def record_item(uow: UnitOfWork, change: ItemChange, decision_id: uuid.UUID) -> int:
    """Accept a new revision of an item; returns the revision. Part of
    ``record_decision``, which has inserted the decision row ``decision_id`` names.

    1. lock the stream's cursor (before reading any exported state);
    2. if the item has a parent, share-lock it and require it active; the event then
       depends on the parent's current revision;
    3. write the item with ``revision + 1`` naming the decision, and queue its event;
       an item that was split is refused (``ItemWasSplit``): its row is left as is.
    The Unit of Work's commit writes the outbox row; nothing is visible before it.
    """
    writer = uow.stream(change.tenant_id, change.catalog_id)
    dependencies: tuple[AggregateRef, ...] = ()
    if change.parent_item_id is not None:
        parent = items.get_for_share(
            uow.tx, change.tenant_id, change.catalog_id, change.parent_item_id
        )
        if parent is None or parent.status != "active":
            raise ParentNotActive(
                f"item {change.parent_item_id!r} is not an active item of "
                f"{change.tenant_id}/{change.catalog_id}"
            )
        dependencies = (AggregateRef(type=AGGREGATE, id=parent.item_id, revision=parent.revision),)
    revision = items.save(
        uow.tx,
        change.tenant_id,
        change.catalog_id,
        change.item_id,
        change.class_id,
        "active",
        change.title,
        change.parent_item_id,
        change.attributes,
        decision_id,
    )
    if revision is None:
        raise ItemWasSplit(f"item {change.item_id!r} was split; its successors carry it on")
    writer.append(
        PendingEvent(
            aggregate=AggregateRef(type=AGGREGATE, id=change.item_id, revision=revision),
            dependencies=dependencies,
            payload=CatalogItemUpserted(
                class_id=change.class_id,
                status="active",
                title=change.title,
                parent_item_id=change.parent_item_id,
                attributes=dict(change.attributes),
            ),
        )
    )
    return revision


def retire_item(
    uow: UnitOfWork,
    tenant_id: str,
    catalog_id: str,
    item_id: str,
    reason: str,
    decision_id: uuid.UUID,
) -> int:
    """Retire an item (it is never deleted); returns the new revision, which names
    ``decision_id``. Part of ``record_decision``. Its identity keys are released in
    the same transaction: a retired item no longer holds its hash (INV-02)."""
    writer = uow.stream(tenant_id, catalog_id)
    current = items.get_for_share(uow.tx, tenant_id, catalog_id, item_id)
    if current is None:
        raise ItemNotFound(f"no item {item_id!r} in {tenant_id}/{catalog_id}")
    revision = items.save(
        uow.tx,
        tenant_id,
        catalog_id,
        item_id,
        current.class_id,
        "retired",
        current.title,
        current.parent_item_id,
        current.attributes,
        decision_id,
    )
    if revision is None:
        raise ItemWasSplit(f"item {item_id!r} was split; it cannot be retired")
    identity_keys.release_keys(uow.tx, tenant_id, catalog_id, item_id)
    writer.append(
        PendingEvent(
            aggregate=AggregateRef(type=AGGREGATE, id=item_id, revision=revision),
            # A retirement only states the change, so the consumer needs the item's
            # previous revision applied first: the event depends on it.
            dependencies=(AggregateRef(type=AGGREGATE, id=item_id, revision=revision - 1),),
            payload=CatalogItemRetired(reason=reason),
        )
    )
    return revision
