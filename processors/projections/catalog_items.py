"""The catalog-item projection: revisions it has applied and how events change it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import psycopg
from psycopg.types.json import Jsonb

from schemas.events import CatalogItemRetired, CatalogItemUpserted, Envelope, aggregate_key
from schemas.ids import AggregateKey

AGGREGATE = "catalog_item"


@dataclass(frozen=True, slots=True)
class ItemState:
    """A whole projection row."""

    tenant_id: str
    catalog_id: str
    item_id: str
    class_id: str
    status: str
    title: str
    parent_item_id: str | None
    attributes: dict[str, str]
    revision: int
    position: int


@dataclass(frozen=True, slots=True)
class StatusChange:
    """A change to a row this batch has not seen whole (its earlier revision is stored)."""

    tenant_id: str
    catalog_id: str
    item_id: str
    status: str
    revision: int
    position: int


Change = ItemState | StatusChange


def load_revisions(
    conn: psycopg.Connection, generation: int, keys: Iterable[AggregateKey]
) -> dict[AggregateKey, int]:
    """The applied revision of each item among ``keys`` that the projection has.

    One index probe per key: the LIMIT (the key is the primary key, so at most one
    row matches anyway) keeps PostgreSQL from turning the lookup into a join, which
    it would plan as a hash of the whole table when it thinks the table small.
    """
    wanted = sorted({k for k in keys if k[2] == AGGREGATE})
    if not wanted:
        return {}
    rows = conn.execute(
        "SELECT k.t, k.c, k.i, p.revision"
        " FROM unnest(%b::text[], %b::text[], %b::text[]) AS k(t, c, i)"
        " CROSS JOIN LATERAL (SELECT revision FROM product_item"
        "  WHERE generation = %b AND tenant_id = k.t AND catalog_id = k.c"
        "  AND item_id = k.i LIMIT 1) p",
        ([k[0] for k in wanted], [k[1] for k in wanted], [k[3] for k in wanted], generation),
    ).fetchall()
    return {(t, c, AGGREGATE, i): int(r) for t, c, i, r in rows}


def fold(events: Iterable[Envelope]) -> dict[AggregateKey, Change]:
    """Collapse the applied events of a batch into one change per item."""
    changes: dict[AggregateKey, Change] = {}
    for event in events:
        key = aggregate_key(event)
        payload = event.payload
        rev, pos = event.aggregate.revision, event.position
        if isinstance(payload, CatalogItemUpserted):
            changes[key] = ItemState(
                event.tenant_id,
                event.catalog_id,
                event.aggregate.id,
                payload.class_id,
                payload.status,
                payload.title,
                payload.parent_item_id,
                dict(payload.attributes),
                rev,
                pos,
            )
        elif isinstance(payload, CatalogItemRetired):
            previous = changes.get(key)
            if isinstance(previous, ItemState):
                changes[key] = replace(previous, status="retired", revision=rev, position=pos)
            else:
                changes[key] = StatusChange(
                    event.tenant_id, event.catalog_id, event.aggregate.id, "retired", rev, pos
                )
    return changes


def write(conn: psycopg.Connection, generation: int, changes: Iterable[Change]) -> None:
    """Write the changes; a row never moves to a lower revision.

    One statement for the whole rows and one for the status changes, the rows sent
    as binary arrays. ``fold`` gives each item at most one change, so no statement
    touches a row twice.
    """
    whole = [c for c in changes if isinstance(c, ItemState)]
    partial = [c for c in changes if isinstance(c, StatusChange)]
    if whole:
        conn.execute(
            "INSERT INTO product_item (generation, tenant_id, catalog_id, item_id,"
            " class_id, status, title, parent_item_id, attributes, revision, position)"
            " SELECT %b, * FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[],"
            " %b::text[], %b::text[], %b::text[], %b::jsonb[], %b::int8[], %b::int8[])"
            " ON CONFLICT (generation, tenant_id, catalog_id, item_id) DO UPDATE SET"
            " class_id = excluded.class_id, status = excluded.status,"
            " title = excluded.title, parent_item_id = excluded.parent_item_id,"
            " attributes = excluded.attributes, revision = excluded.revision,"
            " position = excluded.position, updated_at = now()"
            " WHERE product_item.revision < excluded.revision",
            (
                generation,
                [c.tenant_id for c in whole],
                [c.catalog_id for c in whole],
                [c.item_id for c in whole],
                [c.class_id for c in whole],
                [c.status for c in whole],
                [c.title for c in whole],
                [c.parent_item_id for c in whole],
                [Jsonb(c.attributes) for c in whole],
                [c.revision for c in whole],
                [c.position for c in whole],
            ),
        )
    if partial:
        conn.execute(
            "UPDATE product_item p SET status = k.status, revision = k.revision,"
            " position = k.position, updated_at = now()"
            " FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::int8[],"
            " %b::int8[]) AS k(tenant_id, catalog_id, item_id, status, revision, position)"
            " WHERE p.generation = %b AND p.tenant_id = k.tenant_id"
            " AND p.catalog_id = k.catalog_id AND p.item_id = k.item_id"
            " AND p.revision < k.revision",
            (
                [c.tenant_id for c in partial],
                [c.catalog_id for c in partial],
                [c.item_id for c in partial],
                [c.status for c in partial],
                [c.revision for c in partial],
                [c.position for c in partial],
                generation,
            ),
        )


def apply(conn: psycopg.Connection, generation: int, events: Iterable[Envelope]) -> None:
    """Fold the applied events of a batch and write them: what the applier calls."""
    write(conn, generation, fold(events).values())
