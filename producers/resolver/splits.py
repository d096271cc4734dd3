"""Splits (INV-08): an item becomes several; the source stays, marked 'split'."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from db.repositories import catalog_items as items
from db.repositories import identity as identity_keys
from db.repositories import listing_mappings as mappings
from db.repositories import splits
from db.repositories.catalog_items import ItemRow
from db.repositories.listing_mappings import MappingRow
from db.stream_writer import PendingEvent, StreamWriter
from db.unit_of_work import Transaction, UnitOfWork
from producers.resolver.exceptions import (
    InvalidSplit,
    ItemAlreadyExists,
    ItemNotFound,
    ParentNotActive,
    SourceNotActive,
)
from producers.resolver.facts import DecisionScope
from producers.resolver.listing_mappings import mapped_event
from schemas.events import AggregateRef, CatalogItemSplit, CatalogItemUpserted

AGGREGATE = "item_split"
ITEM = "catalog_item"


@dataclass(frozen=True, slots=True)
class Successor:
    """A new item a split creates."""

    item_id: str
    title: str
    attributes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SplitItem:
    """Split ``source_item_id`` into ``successors``; ``remaps`` moves each listing
    mapped to the source (listing id → successor item id), and must move all of them."""

    source_item_id: str
    successors: tuple[Successor, ...]
    remaps: Mapping[str, str] = field(default_factory=dict)
    split_id: uuid.UUID = field(default_factory=uuid.uuid4)

    def __post_init__(self) -> None:
        ids = [s.item_id for s in self.successors]
        if not ids:
            raise InvalidSplit(f"split of {self.source_item_id!r} names no successor")
        if len(set(ids)) != len(ids) or self.source_item_id in ids:
            raise InvalidSplit(
                f"split of {self.source_item_id!r}: successors must be distinct new items"
            )
        strays = sorted(set(self.remaps.values()) - set(ids))
        if strays:
            raise InvalidSplit(
                f"split of {self.source_item_id!r} remaps onto non-successors {strays}"
            )

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        split_item(uow, scope.tenant_id, scope.catalog_id, scope.decision_id, self)


def split_item(
    uow: UnitOfWork, tenant_id: str, catalog_id: str, decision_id: uuid.UUID, fact: SplitItem
) -> int:
    """Split the item; returns the source's new revision. Part of ``record_decision``.

    1. lock the source (FOR SHARE, upgraded by its UPDATE) and require it active;
    2. lock the listings mapped to it and require ``remaps`` to cover exactly them;
    3. mark the source 'split' with ``revision + 1`` (never deleted), release its
       identity keys, and create each successor at revision 1, with the source's
       class and parent;
    4. move each listing to its successor with ``revision + 1``;
    5. record the split, successors and remaps, and queue one event per item, per
       listing and for the split itself. Earlier decisions are not touched.
    """
    writer = uow.stream(tenant_id, catalog_id)
    tx = uow.tx
    scope = DecisionScope(tenant_id, catalog_id, decision_id)
    source = _active_source(tx, scope, fact.source_item_id)  # 1.
    mapped = _listings_to_remap(tx, scope, source, fact)  # 2.
    parent_refs = _check_successors(tx, scope, source, fact)
    source_revision = _mark_split(tx, writer, scope, source)  # 3.
    successor_refs = _create_successors(tx, writer, scope, source, fact, parent_refs)
    remapped = _move_listings(tx, writer, scope, mapped, fact, successor_refs)  # 4.
    _record_split(tx, writer, scope, fact, source, source_revision, successor_refs, remapped)  # 5.
    return source_revision


def _active_source(tx: Transaction, scope: DecisionScope, item_id: str) -> ItemRow:
    """Step 1 of ``split_item``: the source, share-locked, refused unless active."""
    tenant_id, catalog_id = scope.tenant_id, scope.catalog_id
    source = items.get_for_share(tx, tenant_id, catalog_id, item_id)
    if source is None:
        raise ItemNotFound(f"no item {item_id!r} in {tenant_id}/{catalog_id}")
    if source.status != "active":
        raise SourceNotActive(f"item {source.item_id!r} is {source.status}, not active")
    return source


def _listings_to_remap(
    tx: Transaction, scope: DecisionScope, source: ItemRow, fact: SplitItem
) -> list[MappingRow]:
    """Step 2 of ``split_item``: the listings mapped to the source, locked; ``remaps``
    must cover exactly them."""
    mapped = mappings.for_item_for_update(tx, scope.tenant_id, scope.catalog_id, source.item_id)
    if {m.listing_id for m in mapped} != set(fact.remaps):
        raise InvalidSplit(
            f"split of {source.item_id!r} must remap exactly its listings "
            f"{sorted(m.listing_id for m in mapped)}, got {sorted(fact.remaps)}"
        )
    return mapped


def _check_successors(
    tx: Transaction, scope: DecisionScope, source: ItemRow, fact: SplitItem
) -> tuple[AggregateRef, ...]:
    """Before step 3 of ``split_item``: no successor exists yet, and the source's parent,
    if any, is active; returns what the successors' events depend on (that parent)."""
    tenant_id, catalog_id = scope.tenant_id, scope.catalog_id
    for successor in fact.successors:
        if items.get_for_share(tx, tenant_id, catalog_id, successor.item_id) is not None:
            raise ItemAlreadyExists(f"successor {successor.item_id!r} already exists")
    # Successors keep the source's parent; like any item with a parent (see
    # ``record_item``) they need it active, and their events depend on it.
    parent_refs: tuple[AggregateRef, ...] = ()
    if source.parent_item_id is not None:
        parent = items.get_for_share(tx, tenant_id, catalog_id, source.parent_item_id)
        if parent is None or parent.status != "active":
            raise ParentNotActive(
                f"parent {source.parent_item_id!r} of the successors is not active"
            )
        parent_refs = (AggregateRef(type=ITEM, id=parent.item_id, revision=parent.revision),)
    return parent_refs


def _mark_split(
    tx: Transaction, writer: StreamWriter, scope: DecisionScope, source: ItemRow
) -> int:
    """Step 3 of ``split_item``, the source: its next revision as 'split', its identity
    keys released, its event queued; returns that revision."""
    source_revision = items.save(
        tx,
        scope.tenant_id,
        scope.catalog_id,
        source.item_id,
        source.class_id,
        "split",
        source.title,
        source.parent_item_id,
        source.attributes,
        scope.decision_id,
    )
    # Read active above under a share lock this UPDATE upgrades, so it is not split.
    assert source_revision is not None
    # A split source is no longer the active item its identity keys name (INV-02):
    # free their hashes for the successors, which a reviewer keys by decision.
    identity_keys.release_keys(tx, scope.tenant_id, scope.catalog_id, source.item_id)
    writer.append(
        _item_event(
            source.item_id,
            source_revision,
            source.class_id,
            "split",
            source.title,
            source.parent_item_id,
            source.attributes,
            decision_id=scope.decision_id,
        )
    )
    return source_revision


def _create_successors(
    tx: Transaction,
    writer: StreamWriter,
    scope: DecisionScope,
    source: ItemRow,
    fact: SplitItem,
    parent_refs: tuple[AggregateRef, ...],
) -> list[AggregateRef]:
    """Step 3 of ``split_item``, the successors: each created at revision 1 with the
    source's class and parent, its event queued; returns their revisions."""
    successor_refs = []
    for successor in fact.successors:
        revision = items.save(
            tx,
            scope.tenant_id,
            scope.catalog_id,
            successor.item_id,
            source.class_id,
            "active",
            successor.title,
            source.parent_item_id,
            dict(successor.attributes),
            scope.decision_id,
        )
        assert revision is not None  # a new row: checked absent above
        successor_refs.append(AggregateRef(type=ITEM, id=successor.item_id, revision=revision))
        writer.append(
            _item_event(
                successor.item_id,
                revision,
                source.class_id,
                "active",
                successor.title,
                source.parent_item_id,
                successor.attributes,
                parent_refs,
                decision_id=scope.decision_id,
            )
        )
    return successor_refs


def _move_listings(
    tx: Transaction,
    writer: StreamWriter,
    scope: DecisionScope,
    mapped: list[MappingRow],
    fact: SplitItem,
    successor_refs: list[AggregateRef],
) -> list[tuple[str, str, int]]:
    """Step 4 of ``split_item``: each listing moved to its successor with
    ``revision + 1``, its event queued; returns the remaps as recorded."""
    decision_id = scope.decision_id
    successor_revision = {ref.id: ref.revision for ref in successor_refs}
    remapped = []
    for mapping in mapped:
        to_item = fact.remaps[mapping.listing_id]
        revision = mappings.save(
            tx,
            scope.tenant_id,
            scope.catalog_id,
            mapping.listing_id,
            to_item,
            successor_revision[to_item],
            decision_id,
        )
        remapped.append((mapping.listing_id, to_item, revision))
        writer.append(
            mapped_event(
                mapping.listing_id, revision, to_item, successor_revision[to_item], decision_id
            )
        )
    return remapped


def _record_split(
    tx: Transaction,
    writer: StreamWriter,
    scope: DecisionScope,
    fact: SplitItem,
    source: ItemRow,
    source_revision: int,
    successor_refs: list[AggregateRef],
    remapped: list[tuple[str, str, int]],
) -> None:
    """Step 5 of ``split_item``: the split's row (with its successors and remaps) and
    its event, depending on the source's and the successors' new revisions."""
    splits.insert(
        tx,
        scope.tenant_id,
        scope.catalog_id,
        fact.split_id,
        source.item_id,
        source_revision,
        scope.decision_id,
        [s.item_id for s in fact.successors],
        remapped,
    )
    writer.append(
        PendingEvent(
            aggregate=AggregateRef(type=AGGREGATE, id=str(fact.split_id), revision=1),
            dependencies=(
                AggregateRef(type=ITEM, id=source.item_id, revision=source_revision),
                *successor_refs,
            ),
            payload=CatalogItemSplit(
                source_item_id=source.item_id,
                source_revision=source_revision,
                successor_item_ids=tuple(s.item_id for s in fact.successors),
                remaps=dict(fact.remaps),
                decision_id=scope.decision_id,
            ),
        )
    )


def _item_event(
    item_id: str,
    revision: int,
    class_id: str,
    status: str,
    title: str,
    parent_item_id: str | None,
    attributes: Mapping[str, str],
    dependencies: tuple[AggregateRef, ...] = (),
    *,
    decision_id: uuid.UUID,
) -> PendingEvent:
    # The full item state, the event the product projection already applies: the
    # source's move to 'split' reaches the projection like any other change.
    return PendingEvent(
        aggregate=AggregateRef(type=ITEM, id=item_id, revision=revision),
        dependencies=dependencies,
        payload=CatalogItemUpserted(
            class_id=class_id,
            status=status,
            title=title,
            parent_item_id=parent_item_id,
            attributes=dict(attributes),
            decision_id=decision_id,
        ),
    )
