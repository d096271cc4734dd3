"""The same committed rows for our relay and for Debezium: every transaction writes its
events through the real stream writer (cursor lock, positions, ``outbox``) and copies
the same rows, value bytes and all, into an outbox of Debezium's shape, in the same
transaction.

Debezium's outbox lives in the sandbox's resolver database beside ours, published by
a publication of its own and read through a logical replication slot created before
the first write (so the slot keeps every row the bench commits). Both are dropped
afterwards: a slot outlives its client and would keep WAL, and block dropping the
database, forever.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
from psycopg import sql

from db.stream_writer import PendingEvent, StreamWriter, lock_cursor
from infra.bench.sandbox import Echo, Sandbox
from processors.projections import catalog_items
from schemas.codec import CODEC
from schemas.events import AggregateRef, CatalogItemUpserted
from schemas.ids import StreamId

TABLE = "debezium_outbox"
DDL = f"""
CREATE TABLE {TABLE} (
    id uuid PRIMARY KEY,
    aggregatetype text NOT NULL,
    aggregateid text NOT NULL,
    type text NOT NULL,
    payload bytea NOT NULL
)
"""
"""Debezium's outbox shape (``id``, ``aggregatetype``, ``aggregateid``, ``type``,
``payload``): ``aggregatetype`` routes the row to its topic, ``aggregateid`` keys it."""

COPY = (
    f"INSERT INTO {TABLE} (id, aggregatetype, aggregateid, type, payload)"
    " SELECT event_id, %s, %s, event_type, value FROM outbox"
    " WHERE tenant_id = %s AND catalog_id = %s AND history_epoch = %s AND position > %s"
    " ORDER BY position RETURNING payload"
)
CATALOG = "catalog1"
STREAMS = 8


@dataclass(frozen=True, slots=True)
class Replication:
    publication: str
    slot: str


@contextlib.contextmanager
def replication(box: Sandbox, echo: Echo) -> Iterator[Replication]:
    """Create Debezium's outbox table, its publication and slot; drop both on the way out.

    The slot is created here, before any row is written, so that whatever the
    connector is doing (starting, paused, killed) it finds every row in the slot."""
    names = Replication(f"bench_{box.run_id}_peers", f"bench_{box.run_id}_peers")
    dsn = box.databases.resolver_dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DDL)
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                sql.Identifier(names.publication), sql.Identifier(TABLE)
            )
        )
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (names.slot,))
    echo(f"peers: publication and replication slot {names.slot}")
    try:
        yield names
    finally:
        drop_replication(dsn, names, echo)


def drop_replication(dsn: str, names: Replication, echo: Echo, timeout: float = 30.0) -> None:
    """Drop the slot (once no walsender holds it) and the publication."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        deadline = time.monotonic() + timeout
        while True:
            row = conn.execute(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                (names.slot,),
            ).fetchone()
            if row is None:
                break
            if row[0] is None:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (names.slot,))
                break
            if time.monotonic() > deadline + timeout:
                raise RuntimeError(f"replication slot {names.slot} is still held by {row[0]}")
            if time.monotonic() > deadline:
                # The connector's walsender outlived it: end it, then drop.
                conn.execute("SELECT pg_terminate_backend(%s)", (row[0],))
            time.sleep(0.1)
        conn.execute(
            sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(names.publication))
        )
    echo(f"peers: dropped replication slot and publication {names.slot}")


def stream_of(box: Sandbox, name: str, index: int) -> StreamId:
    return StreamId(box.tenant(f"{name}{index}"), CATALOG, 1)


def write_twins(
    conn: psycopg.Connection, stream: StreamId, first_item: int, rows: int, route: str
) -> list[bytes]:
    """One transaction of ``rows`` new items on ``stream``, in both outboxes.

    1. lock the stream's cursor (``lock_cursor``);
    2. append one ``CatalogItemUpserted`` per item and flush: our outbox rows at
       positions cursor+1 … cursor+rows, the cursor moved, the relay notified;
    3. copy exactly those rows into Debezium's outbox (routed to topic ``route``,
       keyed by the stream);
    4. COMMIT.
    A crash before 4 leaves nothing in either outbox. Returns the value bytes of the
    rows (the same bytes both peers publish), in position order.
    """
    with conn.transaction():
        cursor = lock_cursor(conn, stream)
        writer = StreamWriter(conn, stream, cursor, CODEC)
        for n in range(first_item, first_item + rows):
            item_id = f"item-{n}"
            writer.append(
                PendingEvent(
                    aggregate=AggregateRef(type=catalog_items.AGGREGATE, id=item_id, revision=1),
                    payload=CatalogItemUpserted(
                        class_id="shoe",
                        status="active",
                        title=f"Trail shoe {item_id}",
                        attributes={"colour": "blue", "size": "42"},
                    ),
                )
            )
        writer.flush()
        copied = conn.execute(
            COPY,
            (
                route,
                f"{stream.tenant_id}/{stream.catalog_id}",
                stream.tenant_id,
                stream.catalog_id,
                stream.history_epoch,
                cursor,
            ),
        ).fetchall()
    if len(copied) != rows:
        raise RuntimeError(f"{stream}: {len(copied)} rows copied to {TABLE}, not {rows}")
    return [bytes(r[0]) for r in copied]


def write_backlog(box: Sandbox, name: str, rows: int, batch: int, route: str) -> list[bytes]:
    """``rows`` rows in transactions of ``batch``, from ``STREAMS`` threads (one stream
    each, its own connection) as fast as they go; returns every row's value bytes."""
    share = [rows // STREAMS + (1 if i < rows % STREAMS else 0) for i in range(STREAMS)]
    values: list[list[bytes]] = [[] for _ in range(STREAMS)]
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            stream = stream_of(box, name, index)
            with psycopg.connect(box.databases.resolver_dsn) as conn:
                done = 0
                while done < share[index]:
                    n = min(batch, share[index] - done)
                    values[index].extend(write_twins(conn, stream, done, n, route))
                    done += n
        except BaseException as exc:  # re-raised in the calling thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(STREAMS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [v for per_stream in values for v in per_stream]


def write_paced(
    box: Sandbox, name: str, transactions: int, batch: int, per_second: float, route: str
) -> dict[bytes, float]:
    """``transactions`` of ``batch`` rows at ``per_second`` transactions a second,
    round-robin over ``STREAMS`` streams from one connection: each row's value bytes
    → the wall-clock time (``time.time()``) its COMMIT returned."""
    committed: dict[bytes, float] = {}
    start = time.monotonic()
    with psycopg.connect(box.databases.resolver_dsn) as conn:
        for k in range(transactions):
            due = start + k / per_second
            while (now := time.monotonic()) < due:
                time.sleep(min(due - now, 0.01))
            stream = stream_of(box, name, k % STREAMS)
            values = write_twins(conn, stream, (k // STREAMS) * batch, batch, route)
            at = time.time()
            committed.update((v, at) for v in values)
    return committed
