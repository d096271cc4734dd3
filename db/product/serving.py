"""What the product read API reads: the serving generation of a stream, and the
projection rows of one generation.

Every function reads one generation only (its first key column), and none writes:
the read API calls them inside one ``REPEATABLE READ READ ONLY`` transaction that
first reads the serving generation (``serving_generation``) and then the rows of that
generation, so a response is one snapshot of one generation
(``processors.serving.snapshot``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import class_row


@dataclass(frozen=True, slots=True)
class Served:
    """Where a read comes from: the live consumer's progress row of the stream."""

    history_epoch: int
    generation: int
    position: int


def serving_generation(
    conn: psycopg.Connection, consumer: str, tenant_id: str, catalog_id: str, history_epoch: int
) -> Served | None:
    """The generation the live consumer's progress row names for the stream, with its
    position; None when the consumer has no progress in it yet."""
    row = conn.execute(
        "SELECT history_epoch, generation, position FROM stream_progress"
        " WHERE consumer = %s AND tenant_id = %s AND catalog_id = %s AND history_epoch = %s",
        (consumer, tenant_id, catalog_id, history_epoch),
    ).fetchone()
    return None if row is None else Served(int(row[0]), int(row[1]), int(row[2]))


@dataclass(frozen=True, slots=True)
class ItemRow:
    item_id: str
    class_id: str
    status: str
    title: str
    parent_item_id: str | None
    attributes: dict[str, str]
    revision: int
    position: int
    decision_id: uuid.UUID | None


_ITEM = (
    "item_id, class_id, status, title, parent_item_id, attributes, revision, position, decision_id"
)


def item_page(
    conn: psycopg.Connection,
    generation: int,
    tenant_id: str,
    catalog_id: str,
    after: str | None,
    limit: int,
    status: str | None,
) -> list[ItemRow]:
    """Up to ``limit`` items in item-id order after ``after`` (an index range scan)."""
    with conn.cursor(row_factory=class_row(ItemRow)) as cur:
        return cur.execute(
            f"SELECT {_ITEM} FROM product_item"
            " WHERE generation = %s AND tenant_id = %s AND catalog_id = %s"
            " AND (%s::text IS NULL OR item_id > %s)"
            " AND (%s::text IS NULL OR status = %s)"
            " ORDER BY item_id LIMIT %s",
            (generation, tenant_id, catalog_id, after, after, status, status, limit),
        ).fetchall()


def item(
    conn: psycopg.Connection, generation: int, tenant_id: str, catalog_id: str, item_id: str
) -> ItemRow | None:
    with conn.cursor(row_factory=class_row(ItemRow)) as cur:
        return cur.execute(
            f"SELECT {_ITEM} FROM product_item"
            " WHERE generation = %s AND tenant_id = %s AND catalog_id = %s AND item_id = %s",
            (generation, tenant_id, catalog_id, item_id),
        ).fetchone()


@dataclass(frozen=True, slots=True)
class MappingRow:
    listing_id: str
    item_revision: int
    decision_id: uuid.UUID
    revision: int
    position: int


def listing_mappings_of(
    conn: psycopg.Connection, generation: int, tenant_id: str, catalog_id: str, item_id: str
) -> list[MappingRow]:
    """The listings mapped to the item, in listing order."""
    with conn.cursor(row_factory=class_row(MappingRow)) as cur:
        return cur.execute(
            "SELECT listing_id, item_revision, decision_id, revision, position"
            " FROM product_listing_mapping"
            " WHERE generation = %s AND tenant_id = %s AND catalog_id = %s AND item_id = %s"
            " ORDER BY listing_id",
            (generation, tenant_id, catalog_id, item_id),
        ).fetchall()


@dataclass(frozen=True, slots=True)
class ValueRow:
    attribute_key: str
    label: str | None
    definition_version: int
    value_type: str
    value: str
    item_revision: int
    decision_id: uuid.UUID
    revision: int
    position: int


def attribute_values_of(
    conn: psycopg.Connection, generation: int, tenant_id: str, catalog_id: str, item_id: str
) -> list[ValueRow]:
    """The item's attribute values in key order, each with its definition's label."""
    with conn.cursor(row_factory=class_row(ValueRow)) as cur:
        return cur.execute(
            "SELECT v.attribute_key, d.label, v.definition_version, v.value_type, v.value,"
            " v.item_revision, v.decision_id, v.revision, v.position"
            " FROM product_attribute_value v LEFT JOIN product_attribute_definition d"
            "  ON d.generation = v.generation AND d.tenant_id = v.tenant_id"
            "  AND d.catalog_id = v.catalog_id AND d.attribute_key = v.attribute_key"
            "  AND d.version = v.definition_version"
            " WHERE v.generation = %s AND v.tenant_id = %s AND v.catalog_id = %s"
            " AND v.item_id = %s ORDER BY v.attribute_key",
            (generation, tenant_id, catalog_id, item_id),
        ).fetchall()


@dataclass(frozen=True, slots=True)
class SplitRow:
    split_id: uuid.UUID
    source_item_id: str
    source_revision: int
    successor_item_ids: list[str]
    remaps: dict[str, str]
    decision_id: uuid.UUID
    position: int


def splits_of(
    conn: psycopg.Connection, generation: int, tenant_id: str, catalog_id: str, item_id: str
) -> list[SplitRow]:
    """The splits the item is in: the one it was split by (as the source, at most one)
    and those it came out of (as a successor), in split-id order."""
    with conn.cursor(row_factory=class_row(SplitRow)) as cur:
        return cur.execute(
            "SELECT split_id, source_item_id, source_revision, successor_item_ids, remaps,"
            " decision_id, position FROM product_item_split"
            " WHERE generation = %s AND tenant_id = %s AND catalog_id = %s"
            " AND (source_item_id = %s OR %s = ANY(successor_item_ids))"
            " ORDER BY split_id",
            (generation, tenant_id, catalog_id, item_id, item_id),
        ).fetchall()


@dataclass(frozen=True, slots=True)
class PolicyRow:
    policy_id: str
    version: int
    scope: str
    effective_from: datetime
    effective_to: datetime | None
    terms: dict[str, str]
    decision_id: uuid.UUID
    position: int


def policy_page(
    conn: psycopg.Connection,
    generation: int,
    tenant_id: str,
    catalog_id: str,
    after: tuple[str, int] | None,
    limit: int,
    scope: str | None,
    in_force_at: datetime | None,
) -> list[PolicyRow]:
    """Up to ``limit`` shipping-policy versions in (policy, version) order after
    ``after``; only those of ``scope``, and only those whose window holds
    ``in_force_at``, when given."""
    after_policy, after_version = after if after is not None else (None, None)
    with conn.cursor(row_factory=class_row(PolicyRow)) as cur:
        return cur.execute(
            "SELECT policy_id, version, scope, effective_from, effective_to, terms,"
            " decision_id, position FROM product_shipping_policy_version"
            " WHERE generation = %(g)s AND tenant_id = %(t)s AND catalog_id = %(c)s"
            " AND (%(p)s::text IS NULL OR (policy_id, version) > (%(p)s, %(v)s::int8))"
            " AND (%(s)s::text IS NULL OR scope = %(s)s)"
            " AND (%(at)s::timestamptz IS NULL OR (effective_from <= %(at)s"
            "  AND (effective_to IS NULL OR %(at)s < effective_to)))"
            " ORDER BY policy_id, version LIMIT %(n)s",
            {
                "g": generation,
                "t": tenant_id,
                "c": catalog_id,
                "p": after_policy,
                "v": after_version,
                "s": scope,
                "at": in_force_at,
                "n": limit,
            },
        ).fetchall()


@dataclass(frozen=True, slots=True)
class HitRow:
    item_id: str
    title: str
    status: str
    rank: float


def search_page(
    conn: psycopg.Connection,
    generation: int,
    tenant_id: str,
    catalog_id: str,
    query: str,
    after: tuple[float, str] | None,
    limit: int,
    status: str | None,
) -> list[HitRow]:
    """Up to ``limit`` items whose search document matches ``query`` (web-search
    syntax: words, "quoted phrases", ``or``, ``-word``), best first (``ts_rank``, then
    item id), after ``after`` (the last hit's rank and item id).

    The query is parsed with the configuration the documents are built with
    (``simple``); a query with no words matches nothing.
    """
    after_rank, after_item = after if after is not None else (None, None)
    params: Mapping[str, Any] = {
        "g": generation,
        "t": tenant_id,
        "c": catalog_id,
        "q": query,
        "r": after_rank,
        "i": after_item,
        "s": status,
        "n": limit,
    }
    with conn.cursor(row_factory=class_row(HitRow)) as cur:
        return cur.execute(
            "SELECT item_id, title, status, rank FROM ("
            " SELECT d.item_id, d.title, d.status, ts_rank(d.document, q.query)::float8 AS rank"
            " FROM product_search_document d,"
            "  websearch_to_tsquery('simple'::regconfig, %(q)s) AS q(query)"
            " WHERE d.generation = %(g)s AND d.tenant_id = %(t)s AND d.catalog_id = %(c)s"
            " AND d.document @@ q.query AND (%(s)s::text IS NULL OR d.status = %(s)s)) hit"
            " WHERE %(r)s::float8 IS NULL OR rank < %(r)s OR (rank = %(r)s AND item_id > %(i)s)"
            " ORDER BY rank DESC, item_id LIMIT %(n)s",
            params,
        ).fetchall()
