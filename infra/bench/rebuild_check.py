"""The rebuilt generation against the accepted state, row by row, in bounded memory.

The same checks as ``infra.demo.projection_check`` (its ``CHECKS``: items, listing
mappings, shipping policy versions, splits, attribute definitions and values; the
same columns read from both databases, a difference being a key present on one side
only or with other values) and one more, ``SEARCH_DOCUMENTS``: each item's search
document against the text derived from its accepted item row and attribute values
(so every projection a rebuild loads is compared, the derived one included). Both
sides are streamed from server-side cursors in key
order instead of read into memory, so a million-item catalog is compared without
holding it. Both databases are on one cluster with one default collation, so both
streams come in the same order; a row whose key the other side has not reached
waits in a small pending map until it shows up there (or is a difference at the
end).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import psycopg

from infra.demo.projection_check import CHECKS as PROJECTION_CHECKS
from infra.demo.projection_check import Check, Difference

ITERSIZE = 5000
KEPT = 100
"""Differences kept for the report; all are counted."""

Row = tuple[object, ...]

SEARCH_DOCUMENTS = Check(
    "search_document",
    3,
    # What ``processors.projections.search_documents`` derives: the title, and the
    # item's own attribute values then its attribute values' values, each in key order.
    "SELECT i.tenant_id, i.catalog_id, i.item_id, i.title, i.status,"
    " concat_ws(' ', (SELECT string_agg(a.value, ' ' ORDER BY a.key)"
    "  FROM jsonb_each_text(i.attributes) a),"
    " (SELECT string_agg(v.value, ' ' ORDER BY v.attribute_key) FROM attribute_value v"
    "  WHERE v.tenant_id = i.tenant_id AND v.catalog_id = i.catalog_id"
    "  AND v.item_id = i.item_id)),"
    " i.revision FROM catalog_item i WHERE i.tenant_id LIKE %s",
    "SELECT tenant_id, catalog_id, item_id, title, status, attribute_text, item_revision"
    " FROM product_search_document WHERE generation = %s AND tenant_id LIKE %s",
)
CHECKS = (*PROJECTION_CHECKS, SEARCH_DOCUMENTS)
"""Every projection of a generation: each aggregate's and the search documents."""


@dataclass
class StreamedComparison:
    rows: dict[str, int] = field(default_factory=dict)
    """Accepted rows compared, per aggregate."""
    differences: list[Difference] = field(default_factory=list)
    """The first ``KEPT``."""
    difference_count: int = 0

    def add(self, difference: Difference) -> None:
        self.difference_count += 1
        if len(self.differences) < KEPT:
            self.differences.append(difference)


def _ordered(query: str, keys: int) -> str:
    return f"SELECT * FROM ({query}) q ORDER BY {', '.join(str(i + 1) for i in range(keys))}"


def _stream(conn: psycopg.Connection, name: str, query: str, params: Row) -> Iterator[Row]:
    with conn.cursor(name=name) as cur:
        cur.itersize = ITERSIZE
        cur.execute(query, params)
        for row in cur:
            yield tuple(row)


def compare_rows(
    check: Check,
    accepted: Iterator[Row],
    projected: Iterator[Row],
    out: StreamedComparison,
) -> int:
    """Pair the rows of both streams by key (their first ``check.key_columns``),
    adding each difference to ``out``; returns how many accepted rows there were."""
    k = check.key_columns
    waiting_a: dict[Row, Row] = {}
    waiting_p: dict[Row, Row] = {}
    count = 0

    def meet(key: Row, a: Row | None, p: Row | None) -> None:
        if a != p:
            out.add(Difference(check.name, key, a, p))

    a = next(accepted, None)
    p = next(projected, None)
    while a is not None or p is not None:
        if a is not None:
            count += 1
            key = a[:k]
            if p is not None and p[:k] == key:
                meet(key, a, p)
                a, p = next(accepted, None), next(projected, None)
                continue
            if key in waiting_p:
                meet(key, a, waiting_p.pop(key))
            else:
                waiting_a[key] = a
            a = next(accepted, None)
        if p is not None:
            key = p[:k]
            if key in waiting_a:
                meet(key, waiting_a.pop(key), p)
            else:
                waiting_p[key] = p
            p = next(projected, None)
    for key, row in waiting_a.items():
        meet(key, row, None)
    for key, row in waiting_p.items():
        meet(key, None, row)
    return count


def compare_streamed(
    resolver_dsn: str, product_dsn: str, tenant_like: str, generation: int
) -> StreamedComparison:
    """Every difference between accepted rows and the rows of ``generation`` for
    the tenants matching ``tenant_like``; each side read in one snapshot."""
    out = StreamedComparison()
    with psycopg.connect(resolver_dsn) as resolver, psycopg.connect(product_dsn) as product:
        for conn in (resolver, product):
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        for n, check in enumerate(CHECKS):
            accepted = _stream(
                resolver,
                f"accepted_{n}",
                _ordered(check.accepted, check.key_columns),
                (tenant_like,),
            )
            projected = _stream(
                product,
                f"projected_{n}",
                _ordered(check.projected, check.key_columns),
                (generation, tenant_like),
            )
            out.rows[check.name] = compare_rows(check, accepted, projected, out)
        resolver.rollback()
        product.rollback()
    return out
