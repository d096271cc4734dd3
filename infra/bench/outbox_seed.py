"""A backlog of ``events`` committed, unpublished events in the sandbox's outbox,
written set-based.

Recording a million events through ``record_decision`` would take far longer than
the relay and the agents need to carry them, so the rows are built in PostgreSQL,
one ``INSERT … SELECT generate_series`` per batch of a stream. Each row is what the
writer would have committed for a new catalog item (``CatalogItemUpserted``,
revision 1, item ``item-<position>``): the value is the codec's framed Avro, put
together in SQL from constant parts and the Avro encodings of the three fields that
vary per row (the position, a fresh event id and the item id), in the order the
Envelope schema declares its fields:

    header | tenant_id | catalog_id | history_epoch   (constant per stream)
    position                                          (varies)
    event_id                                          (varies)
    event_type | aggregate.type                       (constant)
    aggregate.id                                      (varies)
    aggregate.revision | dependencies | occurred_at | payload   (constant)

``template`` derives the constant parts from ``CODEC.encode_value`` of a real
envelope and refuses to go on unless its own assembly reproduces the codec's bytes
for other positions and ids; after seeding, ``verify`` decodes sampled rows (the
varint boundaries among them) with the codec. The stream's cursor is moved to its
last position (the outbox's foreign key needs the row; the relay finds work where
the cursor is ahead of the published position) and its first history epoch is
created in the control database.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg

from db.control.epochs import ensure_epoch
from db.settings import DatabaseSettings
from processors.projections import catalog_items
from schemas.codec import CODEC, HEADER_LENGTH
from schemas.events import AggregateRef, CatalogItemUpserted, Envelope, StreamKey

BATCH = 100_000
EPOCH = 1
OCCURRED_AT = datetime(2026, 12, 1, tzinfo=UTC)

# Avro's long (zigzag, then base-128 varint, low group first) and string (its UTF-8
# length as a long, then the bytes), for the non-negative values seeded here.
AVRO_FUNCTIONS = (
    "CREATE OR REPLACE FUNCTION bench_avro_long(n bigint) RETURNS bytea LANGUAGE plpgsql"
    " IMMUTABLE STRICT AS $$"
    " DECLARE z bigint := n * 2; out bytea := ''::bytea;"
    " BEGIN"
    "  IF n < 0 THEN RAISE EXCEPTION 'bench_avro_long: % is negative', n; END IF;"
    "  WHILE z >= 128 LOOP"
    "   out := out || set_byte('\\x00'::bytea, 0, ((z & 127) | 128)::int);"
    "   z := z >> 7;"
    "  END LOOP;"
    "  RETURN out || set_byte('\\x00'::bytea, 0, z::int);"
    " END $$",
    "CREATE OR REPLACE FUNCTION bench_avro_string(s text) RETURNS bytea LANGUAGE sql"
    " IMMUTABLE STRICT AS $$ SELECT bench_avro_long(octet_length(convert_to(s, 'UTF8')))"
    " || convert_to(s, 'UTF8') $$",
)

INSERT = (
    "INSERT INTO outbox (tenant_id, catalog_id, history_epoch, position, event_id,"
    " event_type, key, value)"
    " SELECT %(tenant)s, %(catalog)s, %(epoch)s, r.g, r.e, %(event_type)s, %(key)s,"
    " %(head)s || bench_avro_long(r.g) || bench_avro_string(r.e::text) || %(middle)s"
    " || bench_avro_string('item-' || r.g) || %(tail)s"
    " FROM (SELECT g, gen_random_uuid() AS e FROM generate_series(%(first)s::bigint,"
    " %(last)s::bigint) g) r"
)


def avro_long(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def avro_string(s: str) -> bytes:
    data = s.encode()
    return avro_long(len(data)) + data


def envelope(tenant: str, catalog: str, position: int, event_id: uuid.UUID) -> Envelope:
    """The event seeded at ``position`` (with ``event_id``)."""
    return Envelope(
        tenant_id=tenant,
        catalog_id=catalog,
        history_epoch=EPOCH,
        position=position,
        event_id=event_id,
        aggregate=AggregateRef(type=catalog_items.AGGREGATE, id=f"item-{position}", revision=1),
        occurred_at=OCCURRED_AT,
        payload=CatalogItemUpserted(
            class_id="shoe",
            status="active",
            title="Backlog item",
            attributes={"colour": "blue", "size": "42"},
        ),
    )


@dataclass(frozen=True, slots=True)
class Template:
    """The constant parts of one stream's values (see the module docstring)."""

    tenant: str
    catalog: str
    event_type: str
    key: bytes
    head: bytes
    middle: bytes
    tail: bytes

    def assemble(self, position: int, event_id: uuid.UUID) -> bytes:
        """What the SQL puts together, in Python."""
        return (
            self.head
            + avro_long(position)
            + avro_string(str(event_id))
            + self.middle
            + avro_string(f"item-{position}")
            + self.tail
        )


def template(tenant: str, catalog: str) -> Template:
    """The stream's constant parts, checked against the codec."""
    sample = envelope(tenant, catalog, 1, uuid.uuid4())
    full = CODEC.encode_value(sample)
    head = full[:HEADER_LENGTH] + avro_string(tenant) + avro_string(catalog) + avro_long(EPOCH)
    middle = avro_string(sample.event_type) + avro_string(catalog_items.AGGREGATE)
    before_tail = (
        head + avro_long(1) + avro_string(str(sample.event_id)) + middle + avro_string("item-1")
    )
    if not full.startswith(before_tail):
        raise RuntimeError("the Envelope's Avro layout is not the one the seed assembles")
    built = Template(
        tenant=tenant,
        catalog=catalog,
        event_type=sample.event_type,
        key=CODEC.encode_key(StreamKey(tenant_id=tenant, catalog_id=catalog)),
        head=head,
        middle=middle,
        tail=full[len(before_tail) :],
    )
    for position in (63, 64, 8191, 8192, 1_048_575, 1_048_576):
        event_id = uuid.uuid4()
        expected = CODEC.encode_value(envelope(tenant, catalog, position, event_id))
        if built.assemble(position, event_id) != expected:
            raise RuntimeError(f"the seed's bytes differ from the codec's at position {position}")
    return built


def seed(
    databases: DatabaseSettings,
    tenants: list[str],
    catalog: str,
    events: int,
    echo: Callable[[str], None],
) -> float:
    """``events`` events over ``tenants`` (one stream each, as evenly as they go);
    returns the seconds it took. Each batch commits on its own (a bench's sandbox
    is dropped whatever failed, so no step needs to be undone)."""
    start = time.monotonic()
    per_stream = [events // len(tenants) + (i < events % len(tenants)) for i in range(len(tenants))]
    with psycopg.connect(databases.control_dsn, autocommit=True) as conn:
        for tenant in tenants:
            epoch = ensure_epoch(conn, tenant, catalog)
            assert epoch == EPOCH, f"a new sandbox's first epoch is {EPOCH}, got {epoch}"
    written = 0
    with psycopg.connect(databases.resolver_owner_dsn, autocommit=True) as conn:
        for statement in AVRO_FUNCTIONS:
            conn.execute(statement)
        for tenant, count in zip(tenants, per_stream, strict=True):
            t = template(tenant, catalog)
            conn.execute(
                "INSERT INTO stream_cursor (tenant_id, catalog_id, history_epoch, position)"
                " VALUES (%s, %s, %s, %s)",
                (tenant, catalog, EPOCH, count),
            )
            for first in range(1, count + 1, BATCH):
                last = min(count, first + BATCH - 1)
                conn.execute(
                    INSERT,
                    {
                        "tenant": tenant,
                        "catalog": catalog,
                        "epoch": EPOCH,
                        "event_type": t.event_type,
                        "key": t.key,
                        "head": t.head,
                        "middle": t.middle,
                        "tail": t.tail,
                        "first": first,
                        "last": last,
                    },
                )
                written += last - first + 1
                echo(f"memory: seeded {written:,} of {events:,} outbox rows")
            verify(conn, t, count)
        conn.execute("ANALYZE outbox")
    return time.monotonic() - start


def verify(conn: psycopg.Connection, t: Template, count: int) -> None:
    """Decode sampled rows of the stream with the codec: each must be its event."""
    positions = sorted({p for p in (1, 63, 64, 8191, 8192, count // 2, count) if 1 <= p <= count})
    rows = conn.execute(
        "SELECT position, event_id, value FROM outbox WHERE tenant_id = %s AND catalog_id = %s"
        " AND history_epoch = %s AND position = ANY(%s)",
        (t.tenant, t.catalog, EPOCH, positions),
        binary=True,
    ).fetchall()
    if len(rows) != len(positions):
        raise RuntimeError(f"seeded rows missing in {t.tenant}: {len(rows)} of {len(positions)}")
    for position, event_id, value in rows:
        expected = CODEC.encode_value(envelope(t.tenant, t.catalog, position, event_id))
        if bytes(value) != expected or CODEC.decode_value(bytes(value)).position != position:
            raise RuntimeError(f"seeded row {t.tenant}/{position} is not the codec's bytes")
