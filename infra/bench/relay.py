"""Phase (b): the relay against a bare producer sending the same bytes.

The relay (its default batch size) claims a stream, reads up to 1000 rows above its
published position, produces them, waits for every delivery report and moves the
position, one transaction per batch. The bare producer has the same configuration and sends the
same key, value and header bytes, then flushes once: the most Kafka itself can take
from one producer on this machine.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass

import psycopg
from confluent_kafka import KafkaError, Message, Producer
from psycopg_pool import ConnectionPool

from db.epochs import EpochSource
from db.outbox import OutboxRow
from infra.bench.sandbox import Echo, Sandbox
from infra.bench.timing import Rate, run_threads
from infra.bench.writer import THREADS, write_gapless
from producers.relay.publisher import Publisher, producer_config
from producers.relay.relay import Relay

SEED_BATCH = 100
DELIVERY_TIMEOUT_S = 30.0


@dataclass(slots=True)
class RelayFigures:
    relay: Rate
    bare: Rate
    streams: int


def seed_outbox(box: Sandbox, pool: ConnectionPool, epochs: EpochSource, seconds: float) -> int:
    """Commit events through the gapless writer for ``seconds``; returns how many."""

    def work(thread: int, n: int) -> int:
        ids = [f"relay-{thread}-{n}-{k}" for k in range(SEED_BATCH)]
        write_gapless(pool, epochs, box.tenant(f"r{thread}"), ids)
        return SEED_BATCH + 1  # and the decision's own event

    return run_threads(THREADS, seconds, work).count


# Sent by each producer before its clock starts: connecting, fetching metadata and
# getting the idempotent producer id are not what either side is measured on.
WARM_UP = OutboxRow(0, "00000000-0000-0000-0000-000000000000", 0, b"warm-up", b"warm-up")


def measure_relay(
    box: Sandbox, pool: ConnectionPool, epochs: EpochSource, seconds: float, echo: Echo
) -> RelayFigures:
    dsn = box.databases.resolver_dsn
    with psycopg.connect(dsn) as conn:
        # Phase (a) left its streams unpublished; the relay would ship those too.
        conn.execute("TRUNCATE outbox, stream_publication, stream_cursor")
    publisher = Publisher(box.bootstrap, box.relay_topic, DELIVERY_TIMEOUT_S)
    publisher.publish([WARM_UP])
    relay = Relay(dsn, publisher)
    relay.run_once()  # connects; the outbox is empty, so it publishes nothing
    echo("relay: seeding the outbox through the writer")
    seeded = seed_outbox(box, pool, epochs, seconds * 0.6)

    echo(f"relay: publishing {seeded} rows with Relay.run_once")
    # Seeding left garbage behind; collect it now rather than on the relay's clock
    # (one full collection of this process takes tens of milliseconds).
    gc.collect()
    start = time.perf_counter()
    published = 0
    while published < seeded:
        done = relay.run_once()
        if done == 0:
            raise RuntimeError(f"relay stalled after {published} of {seeded} rows")
        published += done
    relay_rate = Rate(published, time.perf_counter() - start)
    publisher.close()

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT position, event_id::text, history_epoch, key, value FROM outbox"
            " ORDER BY position",
            binary=True,
        ).fetchall()
        streams = conn.execute(
            "SELECT count(DISTINCT (tenant_id, catalog_id, history_epoch)) FROM outbox"
        ).fetchone()
    messages = [(row.key, row.value, row.headers) for row in map(OutboxRow._make, rows)]
    echo(f"relay: the same {len(messages)} messages through a bare producer")
    bare = Producer(producer_config(box.bootstrap, DELIVERY_TIMEOUT_S))
    bare.produce(box.relay_topic, key=WARM_UP.key, value=WARM_UP.value)
    bare.flush(DELIVERY_TIMEOUT_S)
    delivered = 0
    failed = 0

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        nonlocal delivered, failed
        if err is None:
            delivered += 1
        else:
            failed += 1

    # The bare producer is an order of magnitude faster; repeating the same messages
    # keeps its clock running long enough to be read.
    passes = 0
    gc.collect()
    start = time.perf_counter()
    while passes == 0 or time.perf_counter() - start < min(seconds / 2, 1.0):
        for key, value, headers in messages:
            while True:
                try:
                    bare.produce(
                        box.relay_topic,
                        key=key,
                        value=value,
                        headers=headers,
                        on_delivery=on_delivery,
                    )
                    break
                except BufferError:
                    bare.poll(0.05)
        bare.flush(DELIVERY_TIMEOUT_S)
        passes += 1
    bare_rate = Rate(delivered, time.perf_counter() - start)
    if failed or delivered != passes * len(messages):
        raise RuntimeError(f"bare producer: {delivered} delivered, {failed} failed")
    return RelayFigures(relay_rate, bare_rate, int(streams[0]) if streams else 0)
