"""Accepted catalog-item changes: the domain rules and the events they produce.

Both are facts a ``Decision`` accepts (``record_decision``); each item revision names
the decision that accepted it (INV-05).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from db.repositories import catalog_items as items
from db.repositories import identity as identity_keys
from db.repositories.catalog_items import ItemRow, ItemState, ItemWrite
from db.stream_writer import PendingEvent, StreamWriter
from db.unit_of_work import Transaction, UnitOfWork
from producers.resolver.attributes.class_changes import refuse_class_change
from producers.resolver.exceptions import (
    InvalidDecision,
    ItemNotFound,
    ItemWasSplit,
    ParentNotActive,
)
from producers.resolver.facts import DecisionScope, Footprint
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
        record_items(uow, [self], scope.decision_id, scope)

    def footprint(self) -> Footprint:
        reads = {(AGGREGATE, self.parent_item_id)} if self.parent_item_id is not None else set()
        return Footprint(frozenset({(AGGREGATE, self.item_id)}), frozenset(reads))

    @classmethod
    def accept_all(cls, uow: UnitOfWork, scope: DecisionScope, facts: Sequence[ItemChange]) -> None:
        record_items(uow, facts, scope.decision_id, scope)


@dataclass(frozen=True, slots=True)
class RetireItem:
    """Accept that ``item_id`` is no longer offered (it is never deleted)."""

    item_id: str
    reason: str

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        retire_items(uow, scope, [self])

    def footprint(self) -> Footprint:
        return Footprint(frozenset({(AGGREGATE, self.item_id)}))

    @classmethod
    def accept_all(cls, uow: UnitOfWork, scope: DecisionScope, facts: Sequence[RetireItem]) -> None:
        retire_items(uow, scope, facts)


def record_item(uow: UnitOfWork, change: ItemChange, decision_id: uuid.UUID) -> int:
    """Accept a new revision of one item; returns the revision (``record_items``)."""
    return record_items(uow, [change], decision_id)[0]


def record_items(
    uow: UnitOfWork,
    changes: Sequence[ItemChange],
    decision_id: uuid.UUID,
    scope: DecisionScope | None = None,
) -> list[int]:
    """Accept a new revision of each of ``changes`` (distinct items of one stream, none
    the parent of another); returns their revisions in order. Part of
    ``record_decision``, which has inserted the decision row ``decision_id`` names.
    Each step is one statement for all the items.

    1. lock the stream's cursor (before reading any exported state): every domain
       writer of the catalog waits, so what steps 2-4 read stays true until COMMIT;
    2. read each item's class, status and whether it holds attribute values, and
       share-lock the parents named (FOR SHARE, in key order);
    3. check each change in order, the first failure refused: it belongs to the
       decision's stream (with ``scope``); a class change must not strand a value
       (INV-07, ``refuse_class_change``, only for an item that holds values); its
       parent is active (the event then depends on the parent's revision); a split
       item is refused (``ItemWasSplit``);
    4. write every item with ``revision + 1`` naming the decision, and queue their
       events in order: a new item is inserted at revision 1 with the next round trip
       (``insert_new``), an existing one upserted (a split item is never overwritten:
       the upsert's guard, should one be split meanwhile).
    The Unit of Work's commit writes the outbox rows; nothing is visible before it, and
    a refusal or a crash before it leaves no row and consumes no position.
    """
    if not changes:
        return []
    first = changes[0]
    t, c = first.tenant_id, first.catalog_id
    if scope is not None:
        t, c = scope.tenant_id, scope.catalog_id
    writer = uow.stream(t, c)
    tx = uow.tx
    states = items.states(tx, t, c, [ch.item_id for ch in changes])
    parent_ids = [ch.parent_item_id for ch in changes if ch.parent_item_id is not None]
    parents = items.get_many_for_share(tx, t, c, parent_ids)
    dependencies = _check_changes(uow, t, c, changes, states, parents)
    return _write_items(tx, writer, t, c, changes, states, dependencies, decision_id)


def _check_changes(
    uow: UnitOfWork,
    t: str,
    c: str,
    changes: Sequence[ItemChange],
    states: dict[str, ItemState],
    parents: dict[str, ItemRow],
) -> list[tuple[AggregateRef, ...]]:
    """Step 3 of ``record_items``: check each change in order, the first failure
    refused; returns each one's event dependencies (its parent's revision, if any)."""
    dependencies: list[tuple[AggregateRef, ...]] = []
    for change in changes:
        if (change.tenant_id, change.catalog_id) != (t, c):
            raise InvalidDecision(
                f"item {change.item_id!r} belongs to {change.tenant_id}/{change.catalog_id}, "
                f"not to the decision's {t}/{c}"
            )
        state = states.get(change.item_id)
        if state is not None and state.class_id != change.class_id and state.has_values:
            # INV-07: an item whose values rely on its class keeps a class they apply to.
            refuse_class_change(uow, t, c, change.item_id, change.class_id)
        dependencies.append(())
        if change.parent_item_id is not None:
            parent = parents.get(change.parent_item_id)
            if parent is None or parent.status != "active":
                raise ParentNotActive(
                    f"item {change.parent_item_id!r} is not an active item of {t}/{c}"
                )
            dependencies[-1] = (
                AggregateRef(type=AGGREGATE, id=parent.item_id, revision=parent.revision),
            )
        if state is not None and state.status == "split":
            raise ItemWasSplit(f"item {change.item_id!r} was split; its successors carry it on")
    return dependencies


def _write_items(
    tx: Transaction,
    writer: StreamWriter,
    t: str,
    c: str,
    changes: Sequence[ItemChange],
    states: dict[str, ItemState],
    dependencies: list[tuple[AggregateRef, ...]],
    decision_id: uuid.UUID,
) -> list[int]:
    """Step 4 of ``record_items``: write every item's next revision naming the
    decision and queue their events in order; returns the revisions."""
    writes = [
        ItemWrite(ch.item_id, ch.class_id, "active", ch.title, ch.parent_item_id, ch.attributes)
        for ch in changes
    ]
    # What step 2 found absent stays absent until COMMIT (the cursor lock), or was
    # presumed absent by an unlocked unit: those are inserted at revision 1, sent with
    # the next round trip (a plain INSERT, refused should one exist); the others are
    # upserted.
    new = [w for w in writes if w.item_id not in states]
    items.insert_new(tx, t, c, new, decision_id)
    existing = [w for w in writes if w.item_id in states]
    read_at = {w.item_id: states[w.item_id].revision for w in existing}
    revisions = items.save_many(tx, t, c, existing, decision_id, read_at)
    revisions.update((w.item_id, 1) for w in new)
    saved: list[int] = []
    for change, depends_on in zip(changes, dependencies, strict=True):
        revision = revisions.get(change.item_id)
        if revision is None:
            raise ItemWasSplit(f"item {change.item_id!r} was split; its successors carry it on")
        saved.append(revision)
        writer.append(
            PendingEvent(
                aggregate=AggregateRef(type=AGGREGATE, id=change.item_id, revision=revision),
                dependencies=depends_on,
                payload=CatalogItemUpserted(
                    class_id=change.class_id,
                    status="active",
                    title=change.title,
                    parent_item_id=change.parent_item_id,
                    attributes=change.attributes,  # the event keeps a copy of its own
                    decision_id=decision_id,
                ),
            )
        )
    return saved


def retire_item(
    uow: UnitOfWork,
    tenant_id: str,
    catalog_id: str,
    item_id: str,
    reason: str,
    decision_id: uuid.UUID,
) -> int:
    """Retire one item (``retire_items``); returns its new revision."""
    scope = DecisionScope(tenant_id, catalog_id, decision_id)
    return retire_items(uow, scope, [RetireItem(item_id, reason)])[0]


def retire_items(
    uow: UnitOfWork, scope: DecisionScope, retirements: Sequence[RetireItem]
) -> list[int]:
    """Retire items (distinct; they are never deleted); returns the new revisions, in
    order, each naming the decision. Part of ``record_decision``; one statement per
    step for all the items.

    1. lock the stream's cursor, then share-lock the items (in key order);
    2. check each in order: it exists (``ItemNotFound``) and was not split
       (``ItemWasSplit``);
    3. write each item's next revision as retired, keeping its class, title, parent
       and attributes;
    4. release their identity keys: a retired item no longer holds its hash (INV-02);
    5. queue the events in order, each depending on the item's previous revision (a
       retirement only states the change, so the consumer needs that applied first).
    All of it commits with the decision or not at all.
    """
    t, c = scope.tenant_id, scope.catalog_id
    writer = uow.stream(t, c)
    tx = uow.tx
    current = items.get_many_for_share(tx, t, c, [r.item_id for r in retirements])
    rows: list[ItemRow] = []
    for retirement in retirements:
        row = current.get(retirement.item_id)
        if row is None:
            raise ItemNotFound(f"no item {retirement.item_id!r} in {t}/{c}")
        if row.status == "split":
            raise ItemWasSplit(f"item {retirement.item_id!r} was split; it cannot be retired")
        rows.append(row)
    revisions = items.save_many(
        tx,
        t,
        c,
        [
            ItemWrite(r.item_id, r.class_id, "retired", r.title, r.parent_item_id, r.attributes)
            for r in rows
        ],
        scope.decision_id,
    )
    identity_keys.release_keys_of(tx, t, c, [r.item_id for r in rows])
    saved: list[int] = []
    for retirement in retirements:
        revision = revisions.get(retirement.item_id)
        if revision is None:
            raise ItemWasSplit(f"item {retirement.item_id!r} was split; it cannot be retired")
        saved.append(revision)
        writer.append(
            PendingEvent(
                aggregate=AggregateRef(type=AGGREGATE, id=retirement.item_id, revision=revision),
                dependencies=(
                    AggregateRef(type=AGGREGATE, id=retirement.item_id, revision=revision - 1),
                ),
                payload=CatalogItemRetired(reason=retirement.reason, decision_id=scope.decision_id),
            )
        )
    return saved
