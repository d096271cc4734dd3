"""The shared kernel: how streams and aggregates are named on both sides of Kafka.

The resolver writes these names into events and the product side reads them back,
so they have one definition here, below both.
"""

from __future__ import annotations

import re
from typing import NamedTuple

CONSUMER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
"""A consumer's stable name (its durable progress and retention hold are kept under it)."""


class StreamId(NamedTuple):
    """A stream: one tenant's catalog in one history epoch. Its positions are
    contiguous; a new epoch starts a new stream at position 0.

    A tuple, so it unpacks and keys dictionaries like ``(tenant, catalog, epoch)``."""

    tenant_id: str
    catalog_id: str
    history_epoch: int

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.catalog_id}@{self.history_epoch}"


AggregateKey = tuple[str, str, str, str]
"""(tenant_id, catalog_id, aggregate type, aggregate id): one aggregate of a catalog,
in every epoch. A plain tuple: the applier builds one per event and dependency."""


# Composite aggregate ids. Attribute keys hold no slash (the resolver refuses one), so
# an id splits unambiguously at its last slash; item ids may hold slashes.


def definition_id(attribute_key: str, version: int) -> str:
    """The aggregate id of an attribute definition version: ``"<key>/<version>"``."""
    return f"{attribute_key}/{version}"


def parse_definition_id(aggregate_id: str) -> tuple[str, int] | None:
    """``"<key>/<version>"`` as (key, version); None for an id of another shape."""
    key, _, version = aggregate_id.rpartition("/")
    if not key or not version.isdigit():
        return None
    return key, int(version)


def value_id(item_id: str, attribute_key: str) -> str:
    """The aggregate id of an item's value of one attribute: ``"<item_id>/<key>"``."""
    return f"{item_id}/{attribute_key}"


def parse_value_id(aggregate_id: str) -> tuple[str, str] | None:
    """``"<item_id>/<key>"`` as (item id, key); None for an id without both parts."""
    item_id, slash, key = aggregate_id.rpartition("/")
    return (item_id, key) if slash and key else None
