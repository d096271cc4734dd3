"""Phase (b): the relay against a bare producer sending the same bytes.

The relay (its default batch size) claims the streams, reads the rows above their
published positions in chunks, produces them, waits for every delivery report and
moves the positions, one transaction per batch. The bare producer has the same
configuration and sends the same key, value and header bytes (built before its
clock starts), then flushes once: the most Kafka itself can take from one producer
on this machine. The two take turns, the same rows once each per round (the
published positions set back to 0 between rounds), until each has run for a fifth
of the phase's seconds and at least three rounds.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from confluent_kafka import KafkaError, Message, Producer
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.resolver.outbox import ROW_COLUMNS, OutboxRow
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

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            f"SELECT {ROW_COLUMNS} FROM outbox ORDER BY position",
            binary=True,
        ).fetchall()
        streams = conn.execute(
            "SELECT count(DISTINCT (tenant_id, catalog_id, history_epoch)) FROM outbox"
        ).fetchone()
    messages = [(row.key, row.value, row.headers) for row in map(OutboxRow._make, rows)]
    bare = Producer(producer_config(box.bootstrap, DELIVERY_TIMEOUT_S))
    bare.produce(box.relay_topic, key=WARM_UP.key, value=WARM_UP.value)
    bare.flush(DELIVERY_TIMEOUT_S)

    # Rounds in alternation, each side the same rows once per round, until both have
    # run for a while: the broker (its JIT, its page cache) warms up as the phase
    # goes on, and alternating gives both sides the same share of that drift.
    relay_rate, bare_rate = Rate(), Rate()
    rounds = 0
    echo(f"relay: {seeded} rows through Relay.run_once and a bare producer, in alternation")
    while rounds < MIN_ROUNDS or min(relay_rate.seconds, bare_rate.seconds) < seconds / 5:
        if rounds == MAX_ROUNDS:
            break
        if rounds:
            with psycopg.connect(dsn) as conn:  # the same rows again: unpublished
                conn.execute("UPDATE stream_publication SET published_position = 0")
        relay_rate.add(_relay_round(relay, seeded))
        bare_rate.add(_bare_round(bare, box.relay_topic, messages))
        rounds += 1
    publisher.close()
    return RelayFigures(relay_rate, bare_rate, int(streams[0]) if streams else 0)


MIN_ROUNDS = 3
MAX_ROUNDS = 20


def _relay_round(relay: Relay, rows: int) -> Rate:
    # Seeding and the last round left garbage; collect it off the clock (one full
    # collection of this process takes tens of milliseconds).
    gc.collect()
    start = time.perf_counter()
    published = 0
    while published < rows:
        done = relay.run_once()
        if done == 0:
            raise RuntimeError(f"relay stalled after {published} of {rows} rows")
        published += done
    return Rate(published, time.perf_counter() - start)


def _bare_round(bare: Producer, topic: str, messages: list[tuple[bytes, bytes, Any]]) -> Rate:
    delivered = failed = 0

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        nonlocal delivered, failed
        if err is None:
            delivered += 1
        else:
            failed += 1

    gc.collect()
    start = time.perf_counter()
    for key, value, headers in messages:
        while True:
            try:
                bare.produce(topic, key=key, value=value, headers=headers, on_delivery=on_delivery)
                break
            except BufferError:
                bare.poll(0.05)
    bare.flush(DELIVERY_TIMEOUT_S)
    rate = Rate(delivered, time.perf_counter() - start)
    if failed or delivered != len(messages):
        raise RuntimeError(f"bare producer: {delivered} delivered, {failed} failed")
    return rate
