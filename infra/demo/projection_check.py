"""Row by row: do the product projections hold exactly the resolver's accepted state?

For each projected aggregate (items, listing mappings, shipping policy versions,
splits with their successors and remaps, attribute definitions with the classes they
apply to, attribute values) the same columns are read from both databases, keyed the
same way, for the tenants matching a ``LIKE`` pattern; every key present on one side
only, or with different values, is a difference. Each side is read in one snapshot of
its own database, so run it once the consumers have caught up with the streams'
committed cursors (the demo waits for that first).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import psycopg

SERVING_GENERATION = 1


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    key_columns: int
    accepted: str
    """Resolver query; one ``%s``: the tenant pattern."""
    projected: str
    """Product query; two ``%s``: the generation and the tenant pattern."""


_ITEM = "tenant_id, catalog_id, item_id, class_id, status, title, parent_item_id, attributes,"
_ITEM += " decision_id, revision"
_MAPPING = "tenant_id, catalog_id, listing_id, item_id, item_revision, decision_id, revision"
_POLICY = "tenant_id, catalog_id, policy_id, version, scope, effective_from, effective_to,"
_POLICY += " terms, decision_id"
_VALUE = "v.tenant_id, v.catalog_id, v.item_id, v.attribute_key, v.definition_version,"
_VALUE += " {}.value_type, v.value, v.item_revision, v.decision_id, v.revision"
"""``{}``: the table the value type is read from. The resolver keeps it on the
definition version (``d``), the projection on the value row itself (``v``)."""

CHECKS = (
    Check(
        "catalog_item",
        3,
        f"SELECT {_ITEM} FROM catalog_item WHERE tenant_id LIKE %s",
        f"SELECT {_ITEM} FROM product_item WHERE generation = %s AND tenant_id LIKE %s",
    ),
    Check(
        "listing_mapping",
        3,
        f"SELECT {_MAPPING} FROM listing_mapping WHERE tenant_id LIKE %s",
        f"SELECT {_MAPPING} FROM product_listing_mapping"
        " WHERE generation = %s AND tenant_id LIKE %s",
    ),
    Check(
        "shipping_policy_version",
        4,
        f"SELECT {_POLICY} FROM shipping_policy_version WHERE tenant_id LIKE %s",
        f"SELECT {_POLICY} FROM product_shipping_policy_version"
        " WHERE generation = %s AND tenant_id LIKE %s",
    ),
    Check(
        "item_split",
        3,
        "SELECT s.tenant_id, s.catalog_id, s.split_id, s.source_item_id, s.source_revision,"
        " ARRAY(SELECT x.item_id FROM item_split_successor x WHERE x.tenant_id = s.tenant_id"
        "  AND x.catalog_id = s.catalog_id AND x.split_id = s.split_id ORDER BY x.item_id),"
        " (SELECT coalesce(jsonb_object_agg(r.listing_id, r.to_item_id), '{}')"
        "  FROM item_split_remap r WHERE r.tenant_id = s.tenant_id"
        "  AND r.catalog_id = s.catalog_id AND r.split_id = s.split_id),"
        " s.decision_id FROM item_split s WHERE s.tenant_id LIKE %s",
        "SELECT tenant_id, catalog_id, split_id, source_item_id, source_revision,"
        " ARRAY(SELECT unnest(successor_item_ids) ORDER BY 1), remaps, decision_id"
        " FROM product_item_split WHERE generation = %s AND tenant_id LIKE %s",
    ),
    # Enum values keep their order; the classes a version applies to are a set.
    Check(
        "attribute_definition",
        4,
        "SELECT d.tenant_id, d.catalog_id, d.attribute_key, d.version, d.label, d.value_type,"
        " to_jsonb(d.allowed_values),"
        " ARRAY(SELECT a.class_id FROM attribute_applicability a"
        "  WHERE a.tenant_id = d.tenant_id AND a.catalog_id = d.catalog_id"
        "  AND a.attribute_key = d.attribute_key AND a.version = d.version ORDER BY 1),"
        " d.status, d.decision_id, d.revision"
        " FROM attribute_definition d WHERE d.tenant_id LIKE %s",
        "SELECT tenant_id, catalog_id, attribute_key, version, label, value_type,"
        " allowed_values, ARRAY(SELECT jsonb_array_elements_text(applies_to) ORDER BY 1),"
        " status, decision_id, revision"
        " FROM product_attribute_definition WHERE generation = %s AND tenant_id LIKE %s",
    ),
    Check(
        "attribute_value",
        4,
        f"SELECT {_VALUE.format('d')} FROM attribute_value v JOIN attribute_definition d"
        " ON d.tenant_id = v.tenant_id AND d.catalog_id = v.catalog_id"
        " AND d.attribute_key = v.attribute_key AND d.version = v.definition_version"
        " WHERE v.tenant_id LIKE %s",
        f"SELECT {_VALUE.format('v')} FROM product_attribute_value v"
        " WHERE v.generation = %s AND v.tenant_id LIKE %s",
    ),
)


@dataclass(frozen=True, slots=True)
class Difference:
    aggregate: str
    key: tuple[object, ...]
    accepted: tuple[object, ...] | None
    projected: tuple[object, ...] | None

    def __str__(self) -> str:
        key = "/".join(map(str, self.key))
        return f"{self.aggregate} {key}: accepted={self.accepted} projected={self.projected}"


@dataclass(frozen=True, slots=True)
class Comparison:
    rows: dict[str, int]
    """Accepted rows compared, per aggregate."""
    differences: list[Difference]


def _read(
    conn: psycopg.Connection, query: str, params: tuple[object, ...], key: int
) -> dict[tuple[object, ...], tuple[object, ...]]:
    return {tuple(r[:key]): tuple(r) for r in conn.execute(query, params).fetchall()}


def _snapshot(conn: psycopg.Connection) -> None:
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")


def compare(
    resolver_dsn: str,
    product_dsn: str,
    tenant_like: str,
    generation: int = SERVING_GENERATION,
    checks: Iterable[Check] = CHECKS,
) -> Comparison:
    """Every difference between accepted and projected rows of the matching tenants."""
    rows: dict[str, int] = {}
    differences: list[Difference] = []
    with (
        psycopg.connect(resolver_dsn, autocommit=True) as resolver,
        psycopg.connect(product_dsn, autocommit=True) as product,
    ):
        _snapshot(resolver)
        _snapshot(product)
        for check in checks:
            accepted = _read(resolver, check.accepted, (tenant_like,), check.key_columns)
            projected = _read(
                product, check.projected, (generation, tenant_like), check.key_columns
            )
            rows[check.name] = len(accepted)
            for key in sorted(accepted.keys() | projected.keys(), key=str):
                a, p = accepted.get(key), projected.get(key)
                if a != p:
                    differences.append(Difference(check.name, key, a, p))
    return Comparison(rows, differences)


def serving_generations(
    product_dsn: str, consumer: str, tenant_like: str
) -> dict[tuple[str, str], int]:
    """The generation ``consumer`` serves each catalog of the matching tenants from
    (its progress row of the catalog's latest epoch)."""
    with psycopg.connect(product_dsn) as conn:
        rows = conn.execute(
            "SELECT DISTINCT ON (tenant_id, catalog_id) tenant_id, catalog_id, generation"
            " FROM stream_progress WHERE consumer = %s AND tenant_id LIKE %s"
            " ORDER BY tenant_id, catalog_id, history_epoch DESC",
            (consumer, tenant_like),
        ).fetchall()
    return {(str(t), str(c)): int(g) for t, c, g in rows}


def compare_serving(
    resolver_dsn: str, product_dsn: str, tenant_like: str, consumer: str
) -> Comparison:
    """``compare`` with each catalog read in the generation ``consumer`` serves it from
    (after a rebuild's cutover, no longer the first): one comparison per generation in
    use, keeping each catalog's differences from its own generation only."""
    serving = serving_generations(product_dsn, consumer, tenant_like)
    rows: dict[str, int] = {}
    differences: list[Difference] = []
    for generation in sorted(set(serving.values()) | {SERVING_GENERATION}):
        found = compare(resolver_dsn, product_dsn, tenant_like, generation)
        rows = rows or found.rows
        differences += [
            d
            for d in found.differences
            if serving.get((str(d.key[0]), str(d.key[1])), SERVING_GENERATION) == generation
        ]
    return Comparison(rows, differences)
