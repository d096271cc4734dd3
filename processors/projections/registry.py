"""Which projection keeps which aggregate type; the applier goes through this list.

Each projection loads the revisions it has applied and applies a batch's events of
its aggregate type. An aggregate type no projection keeps (``decision``,
``catalog_class``) has no rows: its events still get a terminal outcome (``applied``,
once their dependencies are), and its applied revision always reads as absent. So
nothing may depend on such an aggregate; the resolver's events never do.

A projection is a description (``table.TableProjection``: table, id, columns, fold)
in a module of its own; only the shipping-policy versions keep explicit SQL (their
module says why). A new projection is listed here and gets a builder in the contract
suite (``tests/integration/processors/projections``), which fails without one.

A rebuild's load takes the bulk path (``load_chunk``): each projection copies an
export chunk of its kind straight into its table with one ``COPY``
(``TableProjection`` builds it from the description, the shipping-policy versions
keep theirs), and the derived search documents are built set-based once the last
chunk is in (``search_documents.build_loaded``). ``tests/integration/processors/
rebuild/test_bulk_contract.py`` holds that it leaves every table as the live path
does.

A derived projection (``DERIVED``: the search documents) keeps no aggregate of its
own: it is rebuilt from other projections' rows for whatever a batch touched, after
they wrote it, in the same transaction. Its contract (``test_derived.py`` in the same
suite, which fails for a derived projection it has no case for) is that its rows
equal what the source rows say, whatever the order and batching of the events.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Protocol

import psycopg

from processors.projections import (
    attribute_definitions,
    attribute_values,
    catalog_items,
    item_splits,
    listing_mappings,
    search_documents,
    shipping_policies,
)
from processors.projections.bulk import LoadTarget
from schemas.events import Envelope
from schemas.ids import AggregateKey


class Projection(Protocol):
    """What the applier needs of a projection (``table.TableProjection`` and
    ``shipping_policies.PROJECTION`` are the two kinds)."""

    @property
    def aggregate(self) -> str: ...

    @property
    def table(self) -> str: ...

    def load_revisions(
        self, conn: psycopg.Connection, generation: int, keys: Iterable[AggregateKey]
    ) -> dict[AggregateKey, int]: ...

    def apply(
        self, conn: psycopg.Connection, generation: int, events: Iterable[Envelope]
    ) -> None: ...

    def load_chunk(self, conn: psycopg.Connection, target: LoadTarget, chunk: bytes) -> int:
        """Copy an export chunk of its aggregate type into the target's generation (a
        rebuild's bulk path); the rows inserted."""
        ...


class DerivedProjection(Protocol):
    """What the applier needs of a projection built from other projections' rows
    (``search_documents.PROJECTION``)."""

    @property
    def sources(self) -> frozenset[str]:
        """The aggregate types whose projections it is built from."""
        ...

    @property
    def table(self) -> str: ...

    def refresh(
        self, conn: psycopg.Connection, generation: int, events: Iterable[Envelope]
    ) -> None: ...


def by_aggregate(*projections: Projection) -> dict[str, Projection]:
    """The projections keyed by the aggregate type each keeps, in the order given; a
    type kept by two is refused (at import: two projections of one type would each
    guard the other's revisions)."""
    keyed: dict[str, Projection] = {}
    for projection in projections:
        if projection.aggregate in keyed:
            raise ValueError(f"two projections keep aggregate type {projection.aggregate!r}")
        keyed[projection.aggregate] = projection
    return keyed


BY_AGGREGATE: dict[str, Projection] = by_aggregate(
    catalog_items.PROJECTION,
    listing_mappings.PROJECTION,
    shipping_policies.PROJECTION,
    item_splits.PROJECTION,
    attribute_definitions.PROJECTION,
    attribute_values.PROJECTION,
)
"""Every projection the applier writes, keyed by its aggregate type."""

PROJECTIONS: tuple[Projection, ...] = tuple(BY_AGGREGATE.values())

DERIVED: tuple[DerivedProjection, ...] = (search_documents.PROJECTION,)

TABLES = (*(p.table for p in PROJECTIONS), *(d.table for d in DERIVED))
"""Every projection table, derived ones last."""

LOADED = frozenset(BY_AGGREGATE)
"""The kinds of export record a rebuild's bulk path loads (``schemas.exports.KINDS``)."""


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
    in does not matter; within each, ``fold`` keeps the events' order. The derived
    projections come last: they read what the others have just written.
    """
    by_type: dict[str, list[Envelope]] = defaultdict(list)
    for event in events:
        by_type[event.aggregate.type].append(event)
    for projection in PROJECTIONS:
        of_type = by_type.get(projection.aggregate)
        if of_type:
            projection.apply(conn, generation, of_type)
    for derived in DERIVED:
        sourced = [e for t in sorted(derived.sources) for e in by_type.get(t, ())]
        if sourced:
            derived.refresh(conn, generation, sourced)


_KEY_COLUMNS = (
    "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
    " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary"
    " ORDER BY a.attnum"
)


def analyze(conn: psycopg.Connection) -> None:
    """Refresh the planner's statistics of every projection table's key columns (the
    generation, the stream, the aggregate's id: its primary key) after a bulk load:
    until autovacuum gets to them, they describe the tables without the new
    generation, and the live statements on it, which find rows by those columns,
    would be planned for an empty one. The other columns (a document's ``tsvector``
    is the costly one) are left to autovacuum: no statement the pause waits on
    filters by them. About a third of analyzing whole tables."""
    for table in TABLES:
        columns = [str(r[0]) for r in conn.execute(_KEY_COLUMNS, (table,)).fetchall()]
        listed = f" ({', '.join(columns)})" if columns else ""
        conn.execute(f"ANALYZE {table}{listed}")
