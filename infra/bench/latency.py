"""Phase (d): latency from the writer's COMMIT to the projection row's COMMIT.

Writer threads commit one rule decision creating one item per transaction (two
events: the decision's and the item's) at a fixed offered rate; the relay
runs in a thread (``Relay.run``, woken by NOTIFY); a confluent-kafka consumer loop
feeds ``Applier.apply`` and commits offsets only after it returns. An event's
latency (the item event's, the one that writes a projection row) is the time from
its writer's ``commit()`` returning to the ``apply()`` that committed it returning,
both read from one monotonic clock in this process.
The production agent is a Faust worker; this loop runs the same applier code
without Faust's scheduling, so it measures the pipeline's own cost.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Message, TopicPartition
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.resolver.commit_notifier import CommitNotifier
from infra.bench.sandbox import Echo, Sandbox
from infra.bench.writer import users_codec, write_gapless
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from producers.relay.publisher import Publisher
from producers.relay.relay import Relay
from schemas.codec import HEADER_EVENT_ID

WRITERS = 4
CONSUME_BATCH = 500
DRAIN_TIMEOUT_S = 20.0
ASSIGN_TIMEOUT_S = 30.0


@dataclass(slots=True)
class LatencyFigures:
    offered_per_second: float
    achieved_per_second: float
    events: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    relay_p50_ms: float
    """Commit to the Kafka CreateTime the relay's producer stamped (ms resolution)."""
    consume_apply_p50_ms: float
    """That CreateTime to ``apply()`` returning."""


@dataclass
class _Log:
    lock: threading.Lock = field(default_factory=threading.Lock)
    committed: dict[str, tuple[float, float]] = field(default_factory=dict)
    """event id → (monotonic, wall) when the writer's commit returned."""
    applied: dict[str, tuple[float, float, int]] = field(default_factory=dict)
    """event id → (monotonic, wall) when apply returned, and the Kafka CreateTime (ms)."""
    errors: list[BaseException] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of ``values`` (``q`` in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def _raw(m: Message) -> RawMessage:
    topic, partition, offset = m.topic(), m.partition(), m.offset()
    assert topic is not None and partition is not None and offset is not None
    return RawMessage(topic, partition, offset, m.key(), m.value())


class _ApplierLoop:
    """Consume, apply, then commit offsets: ack only after the product COMMIT."""

    def __init__(self, box: Sandbox, log: _Log) -> None:
        self._log = log
        self._epochs = EpochSource(box.databases.control_dsn)
        self._applier = Applier(
            box.databases.product_dsn, self._epochs, users_codec(), consumer=f"bench-{box.run_id}"
        )
        self.assigned = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": box.bootstrap,
                "group.id": box.consumer_group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self._consumer.subscribe([box.e2e_topic], on_assign=self._on_assign)

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if partitions:
            self.assigned.set()

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                # Block for the first message only, then take what is already buffered:
                # a batch never waits for more messages to arrive.
                first = self._consumer.poll(0.1)
                if first is None:
                    continue
                batch = [first, *self._consumer.consume(num_messages=CONSUME_BATCH - 1, timeout=0)]
                messages = [m for m in batch if m.error() is None]
                if not messages:
                    continue
                self._applier.apply([_raw(m) for m in messages])
                done, wall = time.monotonic(), time.time()
                with self._log.lock:
                    for m in messages:
                        headers = dict(m.headers() or [])
                        raw_id = headers[HEADER_EVENT_ID] or b""
                        event_id = raw_id if isinstance(raw_id, str) else raw_id.decode()
                        self._log.applied[event_id] = (done, wall, m.timestamp()[1])
                self._consumer.commit(asynchronous=True)
        except BaseException as exc:
            self._log.errors.append(exc)
        finally:
            self._consumer.close()
            self._applier.close()
            self._epochs.close()


def _write_one(
    pool: ConnectionPool,
    epochs: EpochSource,
    log: _Log,
    tenant: str,
    item_id: str,
    notifier: CommitNotifier,
) -> str:
    envelopes = write_gapless(pool, epochs, tenant, [item_id], notifier)
    done, wall = time.monotonic(), time.time()
    event_id = str(envelopes[-1].event_id)  # the item's
    with log.lock:
        log.committed[event_id] = (done, wall)
    return event_id


def _wait_for(log: _Log, event_ids: set[str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with log.lock:
            if event_ids <= log.applied.keys():
                return True
            if log.errors:
                raise log.errors[0]
        time.sleep(0.01)
    return False


def _write_paced(
    write: Callable[[str, str], str], log: _Log, tenants: list[str], rate: float, seconds: float
) -> tuple[set[str], float]:
    """``WRITERS`` threads, one per tenant, staggered evenly, each writing one decision
    per ``WRITERS / rate`` seconds for ``seconds``: the ids of the item events written
    (the timed ones), and how long the writing took. A writer's error goes to the log."""
    timed: set[str] = set()
    timed_lock = threading.Lock()
    interval = WRITERS / rate
    start = time.monotonic() + 0.05
    end = start + seconds

    def writer(index: int) -> None:
        due = start + index * interval / WRITERS
        n = 0
        try:
            while due < end:
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                event_id = write(tenants[index], f"e2e-{n}")
                with timed_lock:
                    timed.add(event_id)
                due += interval
                n += 1
        except BaseException as exc:
            log.errors.append(exc)

    writers = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    return timed, time.monotonic() - start


def _figures(log: _Log, timed: set[str], rate: float, written_for: float) -> LatencyFigures:
    """The timed events' latencies, whole and split at the Kafka CreateTime."""
    total, relay_part, apply_part = [], [], []
    for event_id in timed:
        committed, committed_wall = log.committed[event_id]
        applied, applied_wall, created_ms = log.applied[event_id]
        total.append((applied - committed) * 1000)
        relay_part.append(created_ms - committed_wall * 1000)
        apply_part.append(applied_wall * 1000 - created_ms)
    return LatencyFigures(
        offered_per_second=rate,
        achieved_per_second=len(timed) / written_for,
        events=len(timed),
        p50_ms=percentile(total, 50),
        p99_ms=percentile(total, 99),
        max_ms=max(total),
        relay_p50_ms=percentile(relay_part, 50),
        consume_apply_p50_ms=percentile(apply_part, 50),
    )


def measure_latency(
    box: Sandbox,
    pool: ConnectionPool,
    epochs: EpochSource,
    seconds: float,
    rate: float,
    echo: Echo,
) -> LatencyFigures:
    log = _Log()
    stop = threading.Event()
    consumer = _ApplierLoop(box, log)
    publisher = Publisher(box.bootstrap, box.e2e_topic)
    relay = Relay(box.databases.resolver_dsn, publisher, poll_seconds=1.0)
    # The writers wake the relay after COMMIT, as the resolver API's do.
    notifier = CommitNotifier(box.databases.resolver_dsn, "bench-e2e-notifier").start()

    def run_relay() -> None:
        try:
            relay.run(stop)
        except BaseException as exc:
            log.errors.append(exc)

    def write(tenant: str, item_id: str) -> str:
        return _write_one(pool, epochs, log, tenant, item_id, notifier)

    threads = [
        threading.Thread(target=consumer.run, args=(stop,), daemon=True),
        threading.Thread(target=run_relay, daemon=True),
    ]
    for t in threads:
        t.start()
    tenants = [box.tenant(f"e{i}") for i in range(WRITERS)]
    try:
        echo("end-to-end: waiting for the consumer's partitions and a first event")
        if not consumer.assigned.wait(ASSIGN_TIMEOUT_S):
            raise RuntimeError(f"no partitions assigned within {ASSIGN_TIMEOUT_S}s")
        warm = {write(tenant, f"warm-{i}") for i, tenant in enumerate(tenants)}
        if not _wait_for(log, warm, ASSIGN_TIMEOUT_S):
            raise RuntimeError("warm-up events did not reach the projection")

        echo(f"end-to-end: {rate:.0f} decisions/s (2 events each) offered for {seconds:.1f}s")
        timed, written_for = _write_paced(write, log, tenants, rate, seconds)
        if log.errors:
            raise log.errors[0]
        if not _wait_for(log, timed, DRAIN_TIMEOUT_S):
            missing = len(timed - log.applied.keys())
            raise RuntimeError(f"{missing} events not applied {DRAIN_TIMEOUT_S}s after writing")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
        publisher.close()
        notifier.close()
    return _figures(log, timed, rate, written_for)
