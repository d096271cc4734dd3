"""A catalog of ``items`` accepted items, written set-based, as if its history had
been written, published, applied and pruned through W.

Recording a million items through ``record_decision`` would take longer than the
rebuild being measured, so the sandbox's databases get the state such a history
leaves behind, one ``INSERT … SELECT generate_series`` per batch:

- resolver: one rule decision, the items (revision 1, naming it), the stream's
  committed cursor at W = ``items`` (item *i* as if written at position *i*), the
  relay's published position W, and retention pruned through W (the outbox holds
  nothing at or below W, as after the pruner);
- control: the stream's first history epoch;
- product: the live consumer's serving generation 1 with the same items (each at
  its position) and its durable progress at W.

From there on the real writer, relay and agents carry the stream on: the next
decision commits W + 1.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator

import psycopg

from db.epochs import ensure_epoch
from db.settings import DatabaseSettings

BATCH = 100_000
CLASSES = ("shoe", "jacket", "lamp", "kettle", "desk")
COLOURS = ("red", "blue", "green", "black", "white")
EPOCH = 1
SEED_DECISION = uuid.UUID("00000000-0000-4000-8000-00000000beef")

_CLASS = "(ARRAY['" + "','".join(CLASSES) + "'])[1 + g %% 5]"
_COLOUR = "(ARRAY['" + "','".join(COLOURS) + "'])[1 + g %% 5]"
ITEM_COLUMNS = (
    f"'seed-' || lpad(g::text, 7, '0'), {_CLASS}, 'active', 'Seeded item ' || g, NULL,"
    f" jsonb_build_object('colour', {_COLOUR}, 'size', (36 + g %% 12)::text)"
)
"""item_id, class_id, status, title, parent_item_id, attributes of item ``g``."""


def item_id(g: int) -> str:
    return f"seed-{g:07d}"


def item_class(g: int) -> str:
    return CLASSES[g % 5]


def item_copy_line(generation: int, tenant: str, catalog: str, g: int, position: int) -> str:
    """Item ``g`` as one COPY text line of product_item's columns (generation, tenant_id,
    catalog_id, item_id, class_id, status, title, parent_item_id, attributes, revision,
    position): the same values ``ITEM_COLUMNS`` seeds."""
    attributes = json.dumps({"colour": COLOURS[g % 5], "size": str(36 + g % 12)})
    return (
        f"{generation}\t{tenant}\t{catalog}\t{item_id(g)}\t{item_class(g)}\tactive"
        f"\tSeeded item {g}\t\\N\t{attributes}\t1\t{position}\n"
    )


def document_copy_line(generation: int, tenant: str, catalog: str, g: int, position: int) -> str:
    """Item ``g``'s search document as one COPY text line of product_search_document's
    written columns (generation, tenant_id, catalog_id, item_id, title, status,
    attribute_text, item_revision, position): what the load derives from the item
    (its attribute values in key order: colour, size)."""
    return (
        f"{generation}\t{tenant}\t{catalog}\t{item_id(g)}\tSeeded item {g}\tactive"
        f"\t{COLOURS[g % 5]} {36 + g % 12}\t1\t{position}\n"
    )


def batches(items: int) -> Iterator[tuple[int, int]]:
    """(first, last) item numbers of each batch, 1-based and inclusive."""
    for first in range(1, items + 1, BATCH):
        yield first, min(items, first + BATCH - 1)


def seed(
    databases: DatabaseSettings,
    tenant: str,
    catalog: str,
    items: int,
    live_consumer: str,
    echo: Callable[[str], None],
) -> int:
    """Write the state above; returns W. Each batch commits on its own (a bench's
    sandbox is dropped whatever failed, so no step needs to be undone)."""
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
        for first, last in batches(items):
            conn.execute(
                "INSERT INTO catalog_item (tenant_id, catalog_id, item_id, class_id, status,"
                " title, parent_item_id, attributes, revision, decision_id)"
                f" SELECT %s, %s, {ITEM_COLUMNS}, 1, %s FROM generate_series(%s::int, %s::int) g",
                (tenant, catalog, SEED_DECISION, first, last),
            )
            echo(f"rebuild: seeded {last:,} of {items:,} accepted items")
        conn.execute(
            "INSERT INTO stream_cursor (tenant_id, catalog_id, history_epoch, position)"
            " VALUES (%s, %s, %s, %s)",
            (*stream, position),
        )
        conn.execute(
            "INSERT INTO stream_publication (tenant_id, catalog_id, history_epoch,"
            " published_position) VALUES (%s, %s, %s, %s)",
            (*stream, position),
        )
        conn.execute(
            "INSERT INTO stream_retention (tenant_id, catalog_id, history_epoch,"
            " pruned_through) VALUES (%s, %s, %s, %s)",
            (*stream, position),
        )
        conn.execute("ANALYZE catalog_item")
    with psycopg.connect(databases.product_dsn, autocommit=True) as conn:
        for first, last in batches(items):
            conn.execute(
                "INSERT INTO product_item (generation, tenant_id, catalog_id, item_id,"
                " class_id, status, title, parent_item_id, attributes, revision, position)"
                f" SELECT 1, %s, %s, {ITEM_COLUMNS}, 1, g FROM generate_series(%s::int, %s::int) g",
                (tenant, catalog, first, last),
            )
            echo(f"rebuild: seeded {last:,} of {items:,} items into the serving generation")
        conn.execute(
            "INSERT INTO stream_progress (consumer, tenant_id, catalog_id, history_epoch,"
            " position, generation) VALUES (%s, %s, %s, %s, %s, 1)",
            (live_consumer, *stream, position),
        )
        conn.execute("ANALYZE product_item")
    return position
