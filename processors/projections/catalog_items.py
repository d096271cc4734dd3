"""The catalog-item projection: revisions it has applied and how events change it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import psycopg
from psycopg.types.json import Jsonb

from processors.applier.plan import AggregateKey, aggregate_key
from schemas.events import CatalogItemRetired, CatalogItemUpserted, Envelope

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
    wanted = sorted({k for k in keys if k[2] == AGGREGATE})
    if not wanted:
        return {}
    rows = conn.execute(
        "SELECT p.tenant_id, p.catalog_id, p.item_id, p.revision FROM product_item p"
        " JOIN unnest(%s::text[], %s::text[], %s::text[]) AS k(t, c, i)"
        " ON p.tenant_id = k.t AND p.catalog_id = k.c AND p.item_id = k.i"
        " WHERE p.generation = %s",
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
    """Write the changes; a row never moves to a lower revision."""
    whole = [c for c in changes if isinstance(c, ItemState)]
    partial = [c for c in changes if isinstance(c, StatusChange)]
    with conn.cursor() as cur:
        if whole:
            cur.executemany(
                "INSERT INTO product_item (generation, tenant_id, catalog_id, item_id,"
                " class_id, status, title, parent_item_id, attributes, revision, position)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (generation, tenant_id, catalog_id, item_id) DO UPDATE SET"
                " class_id = excluded.class_id, status = excluded.status,"
                " title = excluded.title, parent_item_id = excluded.parent_item_id,"
                " attributes = excluded.attributes, revision = excluded.revision,"
                " position = excluded.position, updated_at = now()"
                " WHERE product_item.revision < excluded.revision",
                [
                    (
                        generation,
                        c.tenant_id,
                        c.catalog_id,
                        c.item_id,
                        c.class_id,
                        c.status,
                        c.title,
                        c.parent_item_id,
                        Jsonb(c.attributes),
                        c.revision,
                        c.position,
                    )
                    for c in whole
                ],
            )
        if partial:
            cur.executemany(
                "UPDATE product_item SET status = %s, revision = %s, position = %s,"
                " updated_at = now() WHERE generation = %s AND tenant_id = %s"
                " AND catalog_id = %s AND item_id = %s AND revision < %s",
                [
                    (
                        c.status,
                        c.revision,
                        c.position,
                        generation,
                        c.tenant_id,
                        c.catalog_id,
                        c.item_id,
                        c.revision,
                    )
                    for c in partial
                ],
            )
