"""Phase (c): ``Applier.apply`` against a bare batched upsert of the same rows.

Both sides get the same batches of 500 encoded messages (new items, fresh event ids,
contiguous positions over several streams), decode them with the same codec, fold
them with the same projection code and upsert the rows with the same statement (one
``INSERT … SELECT FROM unnest`` of binary arrays, ``catalog_items.PROJECTION.upsert``),
one transaction per batch, and both refresh the items' search documents with the
search-document projection's own statement. Only the applier also locks and advances
the streams' progress, checks the inbox, records each event's outcome and plans
dependencies; the bare side writes copies of ``product_item`` and
``product_search_document`` and nothing else. Building the messages is outside the
clock on both sides.
"""

from __future__ import annotations

import gc
import re
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg
from psycopg.types.json import Jsonb

from db.control.epochs import EpochSource, ensure_epoch
from infra.bench.sandbox import Echo, Sandbox
from infra.bench.timing import Rate
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from processors.projections import catalog_items, search_documents
from schemas.codec import CODEC
from schemas.events import AggregateRef, CatalogItemUpserted, Envelope, StreamKey

BATCH = 500
STREAMS = 8
CATALOG = "catalog1"

BARE_TABLES = ("product_item", "product_attribute_value", "product_search_document")
"""The projection tables the bare side writes (or reads) copies of, ``bench_<name>``."""
BARE_TABLE_DDL = [f"CREATE TABLE bench_{t} (LIKE {t} INCLUDING ALL)" for t in BARE_TABLES]


def _on_bare_tables(statement: str) -> str:
    return re.sub(rf"(?<![\w.])({'|'.join(BARE_TABLES)})\b", r"bench_\1", statement)


# The search-document projection's live refresh, aimed at the bench copies.
BARE_REFRESH = _on_bare_tables(search_documents._REFRESH)

# catalog_items.PROJECTION.upsert, aimed at the bench copy of the table.
BARE_UPSERT = (
    "INSERT INTO bench_product_item (generation, tenant_id, catalog_id, item_id,"
    " class_id, status, title, parent_item_id, attributes, revision, position)"
    " SELECT %b, * FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[],"
    " %b::text[], %b::text[], %b::text[], %b::jsonb[], %b::int8[], %b::int8[])"
    " ON CONFLICT (generation, tenant_id, catalog_id, item_id) DO UPDATE SET"
    " class_id = excluded.class_id, status = excluded.status,"
    " title = excluded.title, parent_item_id = excluded.parent_item_id,"
    " attributes = excluded.attributes, revision = excluded.revision,"
    " position = excluded.position, updated_at = now()"
    " WHERE bench_product_item.revision < excluded.revision"
)


@dataclass(slots=True)
class ApplierFigures:
    applier: Rate
    bare: Rate


class MessageSource:
    """Batches of encoded events, as the resolver's writer would have produced them."""

    def __init__(self, box: Sandbox, prefix: str) -> None:
        self.tenants = [box.tenant(f"{prefix}{s}") for s in range(STREAMS)]
        self._keys = [
            CODEC.encode_key(StreamKey(tenant_id=t, catalog_id=CATALOG)) for t in self.tenants
        ]
        self._positions = [0] * STREAMS
        self._offset = 0

    def batch(self, size: int = BATCH) -> list[RawMessage]:
        out = []
        for i in range(size):
            s = i % STREAMS
            self._positions[s] += 1
            position = self._positions[s]
            item_id = f"item-{position}"
            envelope = Envelope(
                tenant_id=self.tenants[s],
                catalog_id=CATALOG,
                history_epoch=1,
                position=position,
                event_id=uuid.uuid4(),
                aggregate=AggregateRef(type=catalog_items.AGGREGATE, id=item_id, revision=1),
                occurred_at=datetime.now(UTC),
                payload=CatalogItemUpserted(
                    class_id="shoe",
                    status="active",
                    title=f"Trail shoe {item_id}",
                    attributes={"colour": "blue", "size": "42"},
                ),
            )
            self._offset += 1
            out.append(
                RawMessage(
                    "bench", s % 6, self._offset, self._keys[s], CODEC.encode_value(envelope)
                )
            )
        return out


def bare_apply(conn: psycopg.Connection, messages: list[RawMessage]) -> int:
    """Decode, fold, upsert and refresh the search documents in one transaction: a
    consumer with no guarantees."""
    events = [CODEC.decode_value(m.value or b"") for m in messages]
    rows = [
        c for c in catalog_items.fold(events).values() if isinstance(c, catalog_items.ItemState)
    ]
    with conn.transaction():
        conn.execute(
            BARE_UPSERT,
            (
                1,
                [c.tenant_id for c in rows],
                [c.catalog_id for c in rows],
                [c.item_id for c in rows],
                [c.class_id for c in rows],
                [c.status for c in rows],
                [c.title for c in rows],
                [c.parent_item_id for c in rows],
                [Jsonb(c.attributes) for c in rows],
                [c.revision for c in rows],
                [c.position for c in rows],
            ),
        )
        keys = search_documents.items_of(events)
        conn.execute(
            BARE_REFRESH, ([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys], 1)
        )
    return len(rows)


def measure_applier(box: Sandbox, seconds: float, echo: Echo) -> ApplierFigures:
    """Alternate one applier batch and one bare batch for ``2 * seconds`` in all."""
    dbs = box.databases
    gapless = MessageSource(box, "a")
    bare = MessageSource(box, "b")
    with psycopg.connect(dbs.control_dsn, autocommit=True) as control:
        for tenant in gapless.tenants:
            ensure_epoch(control, tenant, CATALOG)
    epochs = EpochSource(dbs.control_dsn, ttl_seconds=60.0)
    applier = Applier(dbs.product_dsn, epochs, CODEC, consumer=f"bench-{box.run_id}")
    figures = ApplierFigures(Rate(), Rate())
    with psycopg.connect(dbs.product_dsn) as conn:
        for ddl in BARE_TABLE_DDL:
            conn.execute(ddl)
        conn.commit()
        # Warm-up outside the clock: connections, prepared statements, progress rows.
        applier.apply(gapless.batch())
        bare_apply(conn, bare.batch())
        echo(f"applier: batches of {BATCH}, Applier.apply and bare upsert alternating")
        # A full garbage collection scans every object in the process (imports, the
        # earlier phases) and starts whenever allocations cross a threshold, which in
        # practice falls inside the applier's longer batches: in one unfrozen run, 13
        # ran inside the applier's clock (about 20 % of its time), none inside the
        # bare side's. Frozen, each side pays for the objects it allocates itself.
        gc.collect()
        gc.freeze()
        try:
            while figures.applier.seconds + figures.bare.seconds < 2 * seconds:
                messages = gapless.batch()
                start = time.perf_counter()
                result = applier.apply(messages)
                figures.applier.add(Rate(result.applied, time.perf_counter() - start))
                if result.applied != len(messages):
                    raise RuntimeError(f"applier applied {result.applied} of {len(messages)}")
                messages = bare.batch()
                start = time.perf_counter()
                written = bare_apply(conn, messages)
                figures.bare.add(Rate(written, time.perf_counter() - start))
        finally:
            gc.unfreeze()
    applier.close()
    epochs.close()
    return figures
