"""Splits (INV-08): an item becomes several; the source stays, marked 'split'."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from db.repositories import catalog_items as items
from db.repositories import identity as identity_keys
from db.repositories import listing_mappings as mappings
from db.repositories import splits
from db.stream_writer import PendingEvent
from db.unit_of_work import UnitOfWork
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
    source = items.get_for_share(tx, tenant_id, catalog_id, fact.source_item_id)
    if source is None:
        raise ItemNotFound(f"no item {fact.source_item_id!r} in {tenant_id}/{catalog_id}")
    if source.status != "active":
        raise SourceNotActive(f"item {source.item_id!r} is {source.status}, not active")
    mapped = mappings.for_item_for_update(tx, tenant_id, catalog_id, source.item_id)
    if {m.listing_id for m in mapped} != set(fact.remaps):
        raise InvalidSplit(
            f"split of {source.item_id!r} must remap exactly its listings "
            f"{sorted(m.listing_id for m in mapped)}, got {sorted(fact.remaps)}"
        )
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

    source_revision = items.save(
        tx,
        tenant_id,
        catalog_id,
        source.item_id,
        source.class_id,
        "split",
        source.title,
        source.parent_item_id,
        source.attributes,
        decision_id,
    )
    # Read active above under a share lock this UPDATE upgrades, so it is not split.
    assert source_revision is not None
    # A split source is no longer the active item its identity keys name (INV-02):
    # free their hashes for the successors, which a reviewer keys by decision.
    identity_keys.release_keys(tx, tenant_id, catalog_id, source.item_id)
    writer.append(
        _item_event(
            source.item_id,
            source_revision,
            source.class_id,
            "split",
            source.title,
            source.parent_item_id,
            source.attributes,
        )
    )
    successor_refs = []
    for successor in fact.successors:
        revision = items.save(
            tx,
            tenant_id,
            catalog_id,
            successor.item_id,
            source.class_id,
            "active",
            successor.title,
            source.parent_item_id,
            dict(successor.attributes),
            decision_id,
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
            )
        )
    successor_revision = {ref.id: ref.revision for ref in successor_refs}

    remapped = []
    for mapping in mapped:
        to_item = fact.remaps[mapping.listing_id]
        revision = mappings.save(
            tx,
            tenant_id,
            catalog_id,
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

    splits.insert(
        tx,
        tenant_id,
        catalog_id,
        fact.split_id,
        source.item_id,
        source_revision,
        decision_id,
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
                decision_id=decision_id,
            ),
        )
    )
    return source_revision


def _item_event(
    item_id: str,
    revision: int,
    class_id: str,
    status: str,
    title: str,
    parent_item_id: str | None,
    attributes: Mapping[str, str],
    dependencies: tuple[AggregateRef, ...] = (),
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
        ),
    )
