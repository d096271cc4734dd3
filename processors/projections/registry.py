"""Which projection keeps which aggregate type; the applier goes through this list.

Each projection loads the revisions it has applied and applies a batch's events of
its aggregate type. An aggregate type no projection keeps (``decision``,
``catalog_class``) has no rows: its events still get a terminal outcome (``applied``,
once their dependencies are), and its applied revision always reads as absent. So
nothing may depend on such an aggregate; the resolver's events never do.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psycopg

from processors.projections import (
    attribute_definitions,
    attribute_values,
    catalog_items,
    item_splits,
    listing_mappings,
    shipping_policies,
)
from schemas.events import Envelope
from schemas.ids import AggregateKey

RevisionLoader = Callable[
    [psycopg.Connection, int, Iterable[AggregateKey]], dict[AggregateKey, int]
]
EventWriter = Callable[[psycopg.Connection, int, Iterable[Envelope]], None]


@dataclass(frozen=True, slots=True)
class Projection:
    aggregate: str
    load_revisions: RevisionLoader
    apply: EventWriter


PROJECTIONS: tuple[Projection, ...] = (
    Projection(catalog_items.AGGREGATE, catalog_items.load_revisions, catalog_items.apply),
    Projection(listing_mappings.AGGREGATE, listing_mappings.load_revisions, listing_mappings.apply),
    Projection(
        shipping_policies.AGGREGATE, shipping_policies.load_revisions, shipping_policies.apply
    ),
    Projection(item_splits.AGGREGATE, item_splits.load_revisions, item_splits.apply),
    Projection(
        attribute_definitions.AGGREGATE,
        attribute_definitions.load_revisions,
        attribute_definitions.apply,
    ),
    Projection(attribute_values.AGGREGATE, attribute_values.load_revisions, attribute_values.apply),
)


def load_revisions(
    conn: psycopg.Connection, generation: int, keys: Iterable[AggregateKey]
) -> dict[AggregateKey, int]:
    """The applied revision of every key some projection keeps (absent: never applied)."""
    by_type: dict[str, list[AggregateKey]] = defaultdict(list)
    for key in keys:
        by_type[key[2]].append(key)
    found: dict[AggregateKey, int] = {}
    for projection in PROJECTIONS:
        wanted = by_type.get(projection.aggregate)
        if wanted:
            found.update(projection.load_revisions(conn, generation, wanted))
    return found


def apply(conn: psycopg.Connection, generation: int, events: Iterable[Envelope]) -> None:
    """Write the applied events of a batch (in application order) to their projections.

    The projections share no rows and no constraints, so the order they are written
    in does not matter; within each, ``fold`` keeps the events' order.
    """
    by_type: dict[str, list[Envelope]] = defaultdict(list)
    for event in events:
        by_type[event.aggregate.type].append(event)
    for projection in PROJECTIONS:
        of_type = by_type.get(projection.aggregate)
        if of_type:
            projection.apply(conn, generation, of_type)
