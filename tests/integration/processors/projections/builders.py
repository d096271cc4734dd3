"""One builder per registered projection, for the contract suite: the events of its
aggregates at any revision, and the ids its rows can and cannot have.

A builder's event at revision r differs from its event at any other revision in
what the projection stores, so a row that moved back to a lower revision shows.
Everything is derived from (aggregate id, revision), so building the same event
twice gives the same rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from processors.projections import (
    attribute_definitions,
    attribute_values,
    catalog_items,
    item_splits,
    listing_mappings,
    shipping_policies,
)
from schemas.events import (
    AttributeDefined,
    AttributeValueSet,
    CatalogItemSplit,
    CatalogItemUpserted,
    Envelope,
    ListingMapped,
    Payload,
    ShippingPolicyVersioned,
)
from schemas.ids import parse_definition_id, parse_value_id
from tests.unit.processors.builders import T0, event, ref

_NAMESPACE = uuid.UUID("6f1d3c2e-8a5b-4c1d-9e7f-0a1b2c3d4e5f")


@dataclass(frozen=True, slots=True)
class Builder:
    """``ids``: two aggregate ids the tests write; ``unknown``: a well-formed id they
    never write; ``wrong_shape``: ids no row of the projection can have (for a plain
    id, ids that differ from a written one only in spelling)."""

    aggregate: str
    table: str
    payload: Callable[[str, int], Payload]
    ids: tuple[str, str]
    unknown: str
    wrong_shape: tuple[str, ...]

    def event(self, aggregate_id: str, revision: int) -> Envelope:
        """The event of ``aggregate_id`` at ``revision`` (its stream position is the
        revision: the projection stores it and never compares it)."""
        return event(
            revision,
            ref(self.aggregate, aggregate_id, revision),
            self.payload(aggregate_id, revision),
        )


def _decision(aggregate_id: str, revision: int) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"{aggregate_id}@{revision}")


def _item(item_id: str, revision: int) -> Payload:
    return CatalogItemUpserted(
        class_id=f"class-{revision}",
        status="active" if revision % 2 else "draft",
        title=f"{item_id} r{revision}",
        parent_item_id=None if revision == 1 else f"parent-{revision}",
        attributes={"revision": str(revision)},
    )


def _mapping(listing_id: str, revision: int) -> Payload:
    return ListingMapped(
        item_id=f"item-{revision}",
        item_revision=revision,
        decision_id=_decision(listing_id, revision),
    )


def _policy(policy_id: str, version: int) -> Payload:
    start = T0 + timedelta(days=30 * version)
    return ShippingPolicyVersioned(
        scope="DE" if version % 2 else "AT",
        effective_from=start,
        effective_to=None if version == 3 else start + timedelta(days=30),
        terms={"carrier": f"carrier-{version}"},
        decision_id=_decision(policy_id, version),
    )


def _split(split_id: str, revision: int) -> Payload:
    successors = tuple(f"{split_id[:8]}-{n}" for n in range(revision))  # ragged lists
    return CatalogItemSplit(
        source_item_id=f"source-{split_id[:8]}",
        source_revision=revision,
        successor_item_ids=successors,
        remaps={f"L{n}": s for n, s in enumerate(successors)},
        decision_id=_decision(split_id, revision),
    )


def _definition(definition_id: str, revision: int) -> Payload:
    parts = parse_definition_id(definition_id)
    assert parts is not None
    key, version = parts
    return AttributeDefined(
        attribute_key=key,
        version=version,
        label=f"{key} r{revision}",
        value_type="enum",
        allowed_values=tuple(f"v{n}" for n in range(revision)),
        applies_to=("footwear",) if revision == 1 else ("footwear", f"class-{revision}"),
        status="draft" if revision == 1 else "published",
        decision_id=_decision(definition_id, revision),
    )


def _value(value_id: str, revision: int) -> Payload:
    parts = parse_value_id(value_id)
    assert parts is not None
    item_id, key = parts
    return AttributeValueSet(
        item_id=item_id,
        item_revision=revision,
        attribute_key=key,
        definition_version=1,
        value_type="number",
        value=str(40 + revision),
        decision_id=_decision(value_id, revision),
    )


_SPLITS = (str(uuid.uuid5(_NAMESPACE, "split-1")), str(uuid.uuid5(_NAMESPACE, "split-2")))

_ALL = (
    Builder(
        catalog_items.AGGREGATE,
        "product_item",
        _item,
        ("i1", "i/2"),  # item ids may hold slashes
        "i3",
        ("I1", "i1 ", ""),
    ),
    Builder(
        listing_mappings.AGGREGATE,
        "product_listing_mapping",
        _mapping,
        ("L1", "L2"),
        "L3",
        ("l1", "L1 ", ""),
    ),
    Builder(
        shipping_policies.AGGREGATE,
        "product_shipping_policy_version",
        _policy,
        ("std", "express"),
        "bulky",
        ("STD", "std ", ""),
    ),
    Builder(
        item_splits.AGGREGATE,
        "product_item_split",
        _split,
        _SPLITS,
        str(uuid.uuid5(_NAMESPACE, "split-3")),
        # Not a uuid, and spellings of a written uuid the resolver never writes.
        ("not-a-uuid", "", _SPLITS[0].upper(), _SPLITS[0].replace("-", ""), f"{{{_SPLITS[0]}}}"),
    ),
    Builder(
        attribute_definitions.AGGREGATE,
        "product_attribute_definition",
        _definition,
        ("size/1", "size/2"),
        "size/3",
        ("size", "size/", "/1", "size/x", "size/01", "size/-1", ""),
    ),
    Builder(
        attribute_values.AGGREGATE,
        "product_attribute_value",
        _value,
        ("i1/size", "a/b/colour"),  # the item id holds a slash; the key never does
        "i1/colour",
        ("i1size", "i1/", ""),
    ),
)

BUILDERS: dict[str, Builder] = {b.aggregate: b for b in _ALL}
"""Builder by aggregate type: the contract suite runs for every registered projection
and fails for one that has no builder here."""
