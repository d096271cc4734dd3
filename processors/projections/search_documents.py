"""The search-document projection: one document per catalog item, for full-text search.

A document is derived from other projections' rows rather than from events of an
aggregate of its own: an item's row (``product_item``) and its attribute values
(``product_attribute_value``), in the same generation. So it follows two aggregate
types (``SOURCES``) and is refreshed, in the same transaction, after the
projections that keep them have written the batch (``registry.apply``): for every
item the batch touched, the document is rebuilt from the rows as they now stand.
Rebuilt from the rows, not folded from the events, it cannot depend on the order
events arrive in (a rebuild's load writes an export's records in any order): the
last write to either source leaves it right. It keeps no revision of its own, so it
has no part in the applier's revision checks.

What is searchable (``document``, a generated ``tsvector`` with the ``simple``
configuration: words are lower-cased, never stemmed, no stop words, so a catalog
in any language is matched word for word):

* weight A: the item's title;
* weight B: the values of the item's own attributes (the map on the item event)
  and the values of its attribute values, each list in key order.

Attribute keys and labels are not searchable: they name what a value means, and
a word such as "colour" would match nearly every item. An item of any status has a
document; its ``status`` is kept with it so a search can leave out retired items.

A rebuild's load builds every document once, after its last chunk
(``build_loaded``): one set-based statement over the generation's item rows of the
catalog, each with its values, in the transaction that ends the load. Refreshed per
chunk instead, each item's document would be written twice (the export puts items
before values: once from the item's chunk, then again, an update and its index
entries, from its values' chunk), which cost about two fifths of a load.

A refresh writes only documents whose content changed, so a redelivery leaves a
document untouched (not even ``updated_at``). An attribute value whose item row is
not there yet (only a rebuild's load can write one first) makes no document; the
item's own write makes it later, with that value.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import psycopg

from processors.projections import attribute_values, catalog_items
from processors.projections.bulk import LoadTarget
from schemas.events import AttributeValueSet, Envelope

SOURCES = frozenset({catalog_items.AGGREGATE, attribute_values.AGGREGATE})
TEXT_SEARCH_CONFIG = "simple"

ItemKey = tuple[str, str, str]
"""(tenant_id, catalog_id, item_id)"""

# The document of each item among the keys ``k``, from its row and its attribute
# values in the generation (``_WRITTEN``: written unless it is already stored as it is).
_NEW_DOCUMENTS = (
    "INSERT INTO product_search_document (generation, tenant_id, catalog_id, item_id,"
    " title, status, attribute_text, item_revision, position)"
    " SELECT i.generation, i.tenant_id, i.catalog_id, i.item_id, i.title, i.status,"
    "  concat_ws(' ',"
    "   (SELECT string_agg(a.value, ' ' ORDER BY a.key) FROM jsonb_each_text(i.attributes) a),"
    "   v.texts),"
    "  i.revision, greatest(i.position, v.position)"
    " FROM {keys}"
    " CROSS JOIN LATERAL (SELECT string_agg(av.value, ' ' ORDER BY av.attribute_key) AS texts,"
    "   max(av.position) AS position FROM product_attribute_value av"
    "   WHERE av.generation = i.generation AND av.tenant_id = i.tenant_id"
    "   AND av.catalog_id = i.catalog_id AND av.item_id = i.item_id) v"
)
_WRITTEN = (
    " ON CONFLICT (generation, tenant_id, catalog_id, item_id) DO UPDATE SET"
    " title = excluded.title, status = excluded.status,"
    " attribute_text = excluded.attribute_text, item_revision = excluded.item_revision,"
    " position = excluded.position, updated_at = now()"
    " WHERE (product_search_document.title, product_search_document.status,"
    " product_search_document.attribute_text, product_search_document.item_revision,"
    " product_search_document.position) IS DISTINCT FROM (excluded.title, excluded.status,"
    " excluded.attribute_text, excluded.item_revision, excluded.position)"
)
_DOCUMENTS = _NEW_DOCUMENTS + _WRITTEN

# The live path's keys: the batch's items, as binary arrays.
# Each item is looked up by its key (LATERAL … LIMIT 1), never joined as a set: a
# join is planned from the table's statistics, and while they are stale (a young
# generation, a table autovacuum has not analysed yet) it reads the whole table per
# batch.
_REFRESH = _DOCUMENTS.format(
    keys="unnest(%b::text[], %b::text[], %b::text[]) AS k(tenant_id, catalog_id, item_id)"
    " CROSS JOIN LATERAL (SELECT * FROM product_item p WHERE p.generation = %b"
    "  AND p.tenant_id = k.tenant_id AND p.catalog_id = k.catalog_id"
    "  AND p.item_id = k.item_id LIMIT 1) i"
)

# A rebuild's load, once after its last chunk: the document of every item of the
# catalog in the generation, its values aggregated per item in one pass over their
# primary key and joined to the items as a set. Written unless already stored as it
# is, so running it again changes nothing. Run with nested loops off
# (``build_loaded``): the generation's statistics are not there yet (the load
# analyzes after this), and a nested loop planned for an empty generation would
# aggregate the values again for every item; a hash or merge join reads each side
# once, whatever the estimates.
_BUILD_LOADED = (
    "INSERT INTO product_search_document (generation, tenant_id, catalog_id, item_id,"
    " title, status, attribute_text, item_revision, position)"
    " SELECT i.generation, i.tenant_id, i.catalog_id, i.item_id, i.title, i.status,"
    "  concat_ws(' ',"
    "   (SELECT string_agg(a.value, ' ' ORDER BY a.key) FROM jsonb_each_text(i.attributes) a),"
    "   v.texts),"
    "  i.revision, greatest(i.position, v.position)"
    " FROM product_item i"
    " LEFT JOIN (SELECT av.item_id, string_agg(av.value, ' ' ORDER BY av.attribute_key) AS texts,"
    "   max(av.position) AS position FROM product_attribute_value av"
    "   WHERE av.generation = %(generation)s AND av.tenant_id = %(tenant_id)s"
    "   AND av.catalog_id = %(catalog_id)s GROUP BY av.item_id) v ON v.item_id = i.item_id"
    " WHERE i.generation = %(generation)s AND i.tenant_id = %(tenant_id)s"
    " AND i.catalog_id = %(catalog_id)s" + _WRITTEN
)
_NESTED_LOOPS = "SELECT set_config('enable_nestloop', %s, true)"
_NESTED_LOOPS_NOW = "SELECT current_setting('enable_nestloop')"


def items_of(events: Iterable[Envelope]) -> list[ItemKey]:
    """The items whose documents the events may change, in key order."""
    found: set[ItemKey] = set()
    for event in events:
        if event.aggregate.type == catalog_items.AGGREGATE:
            found.add((event.tenant_id, event.catalog_id, event.aggregate.id))
        elif isinstance(event.payload, AttributeValueSet):
            found.add((event.tenant_id, event.catalog_id, event.payload.item_id))
    return sorted(found)


@dataclass(frozen=True, slots=True)
class SearchDocuments:
    """The projection as the registry lists it among the derived ones."""

    sources: frozenset[str] = SOURCES
    table: str = "product_search_document"

    def refresh(
        self, conn: psycopg.Connection, generation: int, events: Iterable[Envelope]
    ) -> None:
        """Rebuild the documents of the items ``events`` touched, from the rows the
        source projections hold now (call it after they wrote the same events)."""
        keys = items_of(events)
        if not keys:
            return
        conn.execute(
            _REFRESH,
            ([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys], generation),
        )


def build_loaded(conn: psycopg.Connection, target: LoadTarget) -> int:
    """Build the document of every item of ``target``'s catalog in its generation,
    from the rows a rebuild's load wrote (call it once, after the last chunk, in the
    transaction that ends the load); the documents written. Idempotent: a document
    already stored as it is is not written again. Nested loops are off for this
    statement only (``_BUILD_LOADED`` says why); the setting is put back after it."""
    found = conn.execute(_NESTED_LOOPS_NOW).fetchone()
    before = str(found[0]) if found is not None else "on"
    conn.execute(_NESTED_LOOPS, ("off",))
    written = conn.execute(_BUILD_LOADED, target.params()).rowcount
    conn.execute(_NESTED_LOOPS, (before,))
    return written


PROJECTION = SearchDocuments()
