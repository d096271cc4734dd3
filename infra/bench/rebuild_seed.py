"""A catalog of ``items`` accepted items whose rows look like a real catalog's,
written set-based, as if its history had been written, published, applied and
pruned through W.

The mix, per seeded item *g* (``MIX``):

- the item itself (class, title, an attribute map of colour and size);
- 2 listing mappings onto it (``lst-<g>-1``, ``lst-<g>-2``);
- 4 attribute values, one of each published definition: ``finish`` (enum),
  ``grade`` (enum), ``material`` (text), ``weight_g`` (number); the 4 definitions
  apply to every seeded class;
- 2 % of the items (every 50th) were split: the item is ``split`` at revision 2,
  its 2 successors (``seed-<g>.1``, ``.2``) are new items at revision 1, and its 2
  listings were moved onto them (mapping revision 2), as ``producers.resolver.
  splits`` leaves it; the source keeps its attribute values;
- 10 % of the items (every 10th) have a shipping policy of their own with 2
  versions (``[2026-01-01, 2026-07-01)`` and ``[2026-07-01, ∞)``).

That is about 7.3 accepted rows per item (1.04 items, 2 mappings, 4 values, 0.2
policy versions, 0.02 splits), and 8.3 rows in a projection generation with the
search documents (one per item, successors included).

Recording a million items through ``record_decision`` would take longer than the
rebuild being measured, so the sandbox's databases get the state such a history
leaves behind, one ``INSERT … SELECT generate_series`` per kind and batch:

- resolver: one rule decision every row names, the rows above, the stream's
  committed cursor at W = ``items`` (item *g* as if written at position *g*), the
  relay's published position W, and retention pruned through W (the outbox holds
  nothing at or below W, as after the pruner). The attribute values are inserted
  with the deferred INV-07 trigger off for their own transaction (a PL/pgSQL check
  per row would take longer than the rebuild); one set-based query checks the same
  rule over all of them afterwards, and the seed fails if any value breaks it;
- control: the stream's first history epoch;
- product: the live consumer's serving generation 1 with the same rows (each row
  of item *g* at position *g*, the definitions at 1), the search documents derived
  from them as ``processors.projections.search_documents`` derives them, and its
  durable progress at W.

From there on the real writer, relay and agents carry the stream on: the next
decision commits W + 1. Each batch commits on its own: a bench's sandbox is dropped
whatever failed, so a crash mid-seed leaves nothing anyone reads again.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg

from db.control.epochs import ensure_epoch
from db.settings import DatabaseSettings

BATCH = 100_000
CLASSES = ("shoe", "jacket", "lamp", "kettle", "desk")
COLOURS = ("red", "blue", "green", "black", "white")
EPOCH = 1
SEED_DECISION = uuid.UUID("00000000-0000-4000-8000-00000000beef")
SPLIT_EVERY = 50
"""Every 50th item was split (2 %)."""
SUCCESSORS = 2
POLICY_EVERY = 10
"""Every 10th item has a shipping policy (10 %)."""
POLICY_VERSIONS = 2
MAPPINGS_PER_ITEM = 2


@dataclass(frozen=True, slots=True)
class Definition:
    key: str
    label: str
    value_type: str
    allowed: tuple[str, ...]
    value: str
    """SQL of item ``g``'s value (text)."""


DEFINITIONS = (
    Definition(
        "finish",
        "Finish",
        "enum",
        ("gloss", "matte", "satin"),
        "(ARRAY['gloss','matte','satin'])[1 + g %% 3]",
    ),
    Definition("grade", "Grade", "enum", ("A", "B", "C"), "(ARRAY['A','B','C'])[1 + (g / 3) %% 3]"),
    Definition(
        "material",
        "Material",
        "text",
        (),
        "(ARRAY['cotton','steel','oak','glass','wool'])[1 + (g / 5) %% 5]",
    ),
    Definition("weight_g", "Weight (g)", "number", (), "(100 + g %% 900)::text"),
)
"""In key order (the order a search document joins their values in)."""

MIX = {
    "items": 1 + SUCCESSORS / SPLIT_EVERY,
    "listing_mappings": MAPPINGS_PER_ITEM,
    "attribute_values": len(DEFINITIONS),
    "splits": 1 / SPLIT_EVERY,
    "shipping_policy_versions": POLICY_VERSIONS / POLICY_EVERY,
}
"""Accepted rows per seeded item, by kind (the README and the report state it)."""

# SQL of item ``g``'s columns (``%%``: the statements take named parameters).
_ID = "'seed-' || lpad(g::text, 7, '0')"
_SPLIT = f"g %% {SPLIT_EVERY} = 0"
_CLASS = "(ARRAY['" + "','".join(CLASSES) + "'])[1 + g %% 5]"
_COLOUR = "(ARRAY['" + "','".join(COLOURS) + "'])[1 + g %% 5]"
_ATTRIBUTES = f"jsonb_build_object('colour', {_COLOUR}, 'size', (36 + g %% 12)::text)"
_SPLIT_ID = "md5('bench-split-' || g)::uuid"
_SERIES = "generate_series(%(first)s::int, %(last)s::int) g"


def item_id(g: int) -> str:
    return f"seed-{g:07d}"


def item_class(g: int) -> str:
    return CLASSES[g % 5]


def was_split(g: int) -> bool:
    """Whether seeded item ``g`` was split (a split item takes no new revision)."""
    return g % SPLIT_EVERY == 0


def batches(items: int) -> Iterator[tuple[int, int]]:
    """(first, last) item numbers of each batch, 1-based and inclusive."""
    for first in range(1, items + 1, BATCH):
        yield first, min(items, first + BATCH - 1)


def _items(prefix: str, suffix: str) -> str:
    """The seeded items and the successors of the split ones, as the rows of
    ``prefix`` (the table's leading columns' values) + the item's columns +
    ``suffix`` (``{revision}`` and ``{position}`` in it, filled in per kind of row)."""
    common = "%(tenant)s, %(catalog)s"
    seeded = (
        f"SELECT {prefix}{common}, {_ID}, {_CLASS},"
        f" CASE WHEN {_SPLIT} THEN 'split' ELSE 'active' END, 'Seeded item ' || g, NULL,"
        f" {_ATTRIBUTES}, "
        + suffix.format(revision=f"CASE WHEN {_SPLIT} THEN 2 ELSE 1 END", position="g")
        + f" FROM {_SERIES}"
    )
    successors = (
        f"SELECT {prefix}{common}, {_ID} || '.' || k, {_CLASS}, 'active',"
        f" 'Seeded item ' || g || ', part ' || k, NULL, {_ATTRIBUTES}, "
        + suffix.format(revision="1", position="g")
        + f" FROM {_SERIES} CROSS JOIN generate_series(1, {SUCCESSORS}) k WHERE {_SPLIT}"
    )
    return f"{seeded} UNION ALL {successors}"


_ITEM_COLUMNS = (
    "tenant_id, catalog_id, item_id, class_id, status, title, parent_item_id, attributes"
)
_MAPPED_TO = f"CASE WHEN {_SPLIT} THEN {_ID} || '.' || k ELSE {_ID} END"
_MAPPINGS = (
    f"SELECT {{prefix}}%(tenant)s, %(catalog)s, 'lst-' || lpad(g::text, 7, '0') || '-' || k,"
    f" {_MAPPED_TO}, 1, %(decision)s, CASE WHEN {_SPLIT} THEN 2 ELSE 1 END{{suffix}}"
    f" FROM {_SERIES} CROSS JOIN generate_series(1, {MAPPINGS_PER_ITEM}) k"
)
_VALUE_OF = "CASE d.key " + " ".join(f"WHEN '{d.key}' THEN {d.value}" for d in DEFINITIONS) + " END"
_KEYS = (
    "(VALUES "
    + ", ".join(f"('{d.key}', '{d.value_type}')" for d in DEFINITIONS)
    + ") d(key, value_type)"
)
_POLICIES = (
    f"SELECT {{prefix}}%(tenant)s, %(catalog)s, 'ship-' || lpad(g::text, 7, '0'), v,"
    " CASE WHEN g %% 20 = 0 THEN 'international' ELSE 'domestic' END,"
    " CASE v WHEN 1 THEN timestamptz '2026-01-01 00:00:00+00'"
    "  ELSE timestamptz '2026-07-01 00:00:00+00' END,"
    " CASE v WHEN 1 THEN timestamptz '2026-07-01 00:00:00+00' END,"
    " jsonb_build_object('carrier', (ARRAY['dhl','ups','post'])[1 + g %% 3],"
    "  'days', 2 + v, 'fee_cents', 395 + 100 * v),"
    f" %(decision)s{{suffix}} FROM {_SERIES}"
    f" CROSS JOIN generate_series(1, {POLICY_VERSIONS}) v WHERE g %% {POLICY_EVERY} = 0"
)


def _resolver_batch(conn: psycopg.Connection, params: dict[str, object]) -> None:
    """Every accepted row of the batch's items, in the order of their foreign keys."""
    conn.execute(
        f"INSERT INTO catalog_item ({_ITEM_COLUMNS}, revision, decision_id) "
        + _items("", "{revision}, %(decision)s"),
        params,
    )
    conn.execute(
        "INSERT INTO listing_mapping (tenant_id, catalog_id, listing_id, item_id, item_revision,"
        " decision_id, revision) " + _MAPPINGS.format(prefix="", suffix=""),
        params,
    )
    with conn.transaction():
        # INV-07 is checked once, set-based, after the seed (``_check_values``).
        conn.execute("ALTER TABLE attribute_value DISABLE TRIGGER attribute_value_inv07")
        conn.execute(
            "INSERT INTO attribute_value (tenant_id, catalog_id, item_id, attribute_key,"
            " definition_version, value, item_revision, revision, decision_id)"
            f" SELECT %(tenant)s, %(catalog)s, {_ID}, d.key, 1, {_VALUE_OF}, 1, 1, %(decision)s"
            f" FROM {_SERIES} CROSS JOIN {_KEYS}",
            params,
        )
        conn.execute("ALTER TABLE attribute_value ENABLE TRIGGER attribute_value_inv07")
    conn.execute(
        "INSERT INTO shipping_policy_version (tenant_id, catalog_id, policy_id, version, scope,"
        " effective_from, effective_to, terms, decision_id) "
        + _POLICIES.format(prefix="", suffix=""),
        params,
    )
    conn.execute(
        "INSERT INTO item_split (tenant_id, catalog_id, split_id, source_item_id,"
        f" source_revision, decision_id) SELECT %(tenant)s, %(catalog)s, {_SPLIT_ID}, {_ID}, 2,"
        f" %(decision)s FROM {_SERIES} WHERE {_SPLIT}",
        params,
    )
    conn.execute(
        "INSERT INTO item_split_successor (tenant_id, catalog_id, split_id, item_id)"
        f" SELECT %(tenant)s, %(catalog)s, {_SPLIT_ID}, {_ID} || '.' || k FROM {_SERIES}"
        f" CROSS JOIN generate_series(1, {SUCCESSORS}) k WHERE {_SPLIT}",
        params,
    )
    conn.execute(
        "INSERT INTO item_split_remap (tenant_id, catalog_id, split_id, listing_id, to_item_id,"
        f" mapping_revision) SELECT %(tenant)s, %(catalog)s, {_SPLIT_ID},"
        f" 'lst-' || lpad(g::text, 7, '0') || '-' || k, {_ID} || '.' || k, 2 FROM {_SERIES}"
        f" CROSS JOIN generate_series(1, {MAPPINGS_PER_ITEM}) k WHERE {_SPLIT}",
        params,
    )


def _product_batch(conn: psycopg.Connection, params: dict[str, object]) -> None:
    """The batch's rows in the serving generation 1, then the documents of its items."""
    conn.execute(
        f"INSERT INTO product_item (generation, {_ITEM_COLUMNS}, revision, position) "
        + _items("1, ", "{revision}, {position}"),
        params,
    )
    conn.execute(
        "INSERT INTO product_listing_mapping (generation, tenant_id, catalog_id, listing_id,"
        " item_id, item_revision, decision_id, revision, position) "
        + _MAPPINGS.format(prefix="1, ", suffix=", g"),
        params,
    )
    conn.execute(
        "INSERT INTO product_attribute_value (generation, tenant_id, catalog_id, item_id,"
        " attribute_key, definition_version, value_type, value, item_revision, decision_id,"
        " revision, position)"
        f" SELECT 1, %(tenant)s, %(catalog)s, {_ID}, d.key, 1, d.value_type, {_VALUE_OF}, 1,"
        f" %(decision)s, 1, g FROM {_SERIES} CROSS JOIN {_KEYS}",
        params,
    )
    conn.execute(
        "INSERT INTO product_shipping_policy_version (generation, tenant_id, catalog_id,"
        " policy_id, version, scope, effective_from, effective_to, terms, decision_id,"
        " position) " + _POLICIES.format(prefix="1, ", suffix=", g"),
        params,
    )
    conn.execute(
        "INSERT INTO product_item_split (generation, tenant_id, catalog_id, split_id,"
        " source_item_id, source_revision, successor_item_ids, remaps, decision_id, revision,"
        f" position) SELECT 1, %(tenant)s, %(catalog)s, {_SPLIT_ID}, {_ID}, 2,"
        f" ARRAY[{_ID} || '.1', {_ID} || '.2'],"
        f" jsonb_build_object('lst-' || lpad(g::text, 7, '0') || '-1', {_ID} || '.1',"
        f"  'lst-' || lpad(g::text, 7, '0') || '-2', {_ID} || '.2'),"
        f" %(decision)s, 1, g FROM {_SERIES} WHERE {_SPLIT}",
        params,
    )
    # What ``search_documents`` derives: the title (A), the item's own attribute values
    # and its attribute values' values, each in key order (B).
    conn.execute(
        "INSERT INTO product_search_document (generation, tenant_id, catalog_id, item_id,"
        " title, status, attribute_text, item_revision, position)"
        " SELECT 1, i.tenant_id, i.catalog_id, i.item_id, i.title, i.status,"
        "  concat_ws(' ', (SELECT string_agg(a.value, ' ' ORDER BY a.key)"
        "   FROM jsonb_each_text(i.attributes) a), v.texts),"
        "  i.revision, greatest(i.position, v.position)"
        " FROM product_item i LEFT JOIN LATERAL (SELECT string_agg(av.value, ' '"
        "  ORDER BY av.attribute_key) AS texts, max(av.position) AS position"
        "  FROM product_attribute_value av WHERE av.generation = 1"
        "  AND av.tenant_id = i.tenant_id AND av.catalog_id = i.catalog_id"
        "  AND av.item_id = i.item_id) v ON true"
        " WHERE i.generation = 1 AND i.tenant_id = %(tenant)s AND i.catalog_id = %(catalog)s"
        " AND i.position BETWEEN %(first)s AND %(last)s",  # the batch's items (no index: a scan)
        params,
    )


def _definitions(conn: psycopg.Connection, tenant: str, catalog: str, product: bool) -> None:
    for d in DEFINITIONS:
        if product:
            conn.execute(
                "INSERT INTO product_attribute_definition (generation, tenant_id, catalog_id,"
                " attribute_key, version, label, value_type, allowed_values, applies_to,"
                " status, decision_id, revision, position)"
                " VALUES (1, %s, %s, %s, 1, %s, %s, %s, %s, 'published', %s, 2, 1)",
                (
                    tenant,
                    catalog,
                    d.key,
                    d.label,
                    d.value_type,
                    json.dumps(list(d.allowed)),
                    json.dumps(sorted(CLASSES)),
                    SEED_DECISION,
                ),
            )
            continue
        # Defined as a draft with its applicability, then published (applicability is
        # frozen once published), as ``producers.resolver.attributes`` leaves it.
        conn.execute(
            "INSERT INTO attribute_definition (tenant_id, catalog_id, attribute_key, version,"
            " label, value_type, allowed_values, status, revision, decision_id)"
            " VALUES (%s, %s, %s, 1, %s, %s, %s, 'draft', 1, %s)",
            (tenant, catalog, d.key, d.label, d.value_type, list(d.allowed), SEED_DECISION),
        )
        conn.execute(
            "INSERT INTO attribute_applicability (tenant_id, catalog_id, attribute_key, version,"
            " class_id) SELECT %s, %s, %s, 1, unnest(%s::text[])",
            (tenant, catalog, d.key, list(CLASSES)),
        )
        conn.execute(
            "UPDATE attribute_definition SET status = 'published', revision = 2"
            " WHERE tenant_id = %s AND catalog_id = %s AND attribute_key = %s AND version = 1",
            (tenant, catalog, d.key),
        )


def _check_values(conn: psycopg.Connection, tenant: str, catalog: str) -> None:
    """INV-07 over every seeded value at once: what the trigger left off checks row by
    row (a published definition applying to the item's class, a value of its type)."""
    row = conn.execute(
        "SELECT count(*) FROM attribute_value v"
        " JOIN attribute_definition d ON d.tenant_id = v.tenant_id"
        "  AND d.catalog_id = v.catalog_id AND d.attribute_key = v.attribute_key"
        "  AND d.version = v.definition_version"
        " JOIN catalog_item i ON i.tenant_id = v.tenant_id AND i.catalog_id = v.catalog_id"
        "  AND i.item_id = v.item_id"
        " WHERE v.tenant_id = %s AND v.catalog_id = %s AND (d.status <> 'published'"
        "  OR NOT attribute_value_fits(d.value_type, d.allowed_values, v.value)"
        "  OR NOT EXISTS (SELECT 1 FROM attribute_applicability a"
        "   WHERE a.tenant_id = v.tenant_id AND a.catalog_id = v.catalog_id"
        "   AND a.attribute_key = v.attribute_key AND a.version = v.definition_version"
        "   AND a.class_id = i.class_id))",
        (tenant, catalog),
    ).fetchone()
    assert row is not None
    if row[0]:
        raise RuntimeError(f"the seed wrote {row[0]} attribute values that break INV-07")


def seed(
    databases: DatabaseSettings,
    tenant: str,
    catalog: str,
    items: int,
    live_consumer: str,
    echo: Callable[[str], None],
) -> int:
    """Write the state above; returns W."""
    position = items
    with psycopg.connect(databases.control_dsn, autocommit=True) as conn:
        epoch = ensure_epoch(conn, tenant, catalog)
    assert epoch == EPOCH, f"a new sandbox's first epoch is {EPOCH}, got {epoch}"
    stream = (tenant, catalog, EPOCH)
    with psycopg.connect(databases.resolver_owner_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO decision (tenant_id, catalog_id, decision_id, action, actor,"
            " actor_kind, rationale, evidence) VALUES (%s, %s, %s, 'create',"
            " 'rule:bench-seed', 'rule', 'seeded catalog', %s)",
            (
                tenant,
                catalog,
                SEED_DECISION,
                json.dumps([{"capture_id": "bench-seed", "locator": "$.items"}]),
            ),
        )
        _definitions(conn, tenant, catalog, product=False)
        for first, last in batches(items):
            params = _params(tenant, catalog, first, last)
            _resolver_batch(conn, params)
            echo(f"rebuild: seeded {last:,} of {items:,} accepted items and their rows")
        _check_values(conn, tenant, catalog)
        for table, column in (
            ("stream_cursor", "position"),
            ("stream_publication", "published_position"),
            ("stream_retention", "pruned_through"),
        ):
            conn.execute(
                f"INSERT INTO {table} (tenant_id, catalog_id, history_epoch, {column})"
                " VALUES (%s, %s, %s, %s)",
                (*stream, position),
            )
        conn.execute("ANALYZE")
    with psycopg.connect(databases.product_dsn, autocommit=True) as conn:
        _definitions(conn, tenant, catalog, product=True)
        for first, last in batches(items):
            _product_batch(conn, _params(tenant, catalog, first, last))
            echo(f"rebuild: seeded {last:,} of {items:,} items into the serving generation")
        conn.execute(
            "INSERT INTO stream_progress (consumer, tenant_id, catalog_id, history_epoch,"
            " position, generation) VALUES (%s, %s, %s, %s, %s, 1)",
            (live_consumer, *stream, position),
        )
        conn.execute("ANALYZE")
    return position


def _params(tenant: str, catalog: str, first: int, last: int) -> dict[str, object]:
    return {
        "tenant": tenant,
        "catalog": catalog,
        "decision": SEED_DECISION,
        "first": first,
        "last": last,
    }
