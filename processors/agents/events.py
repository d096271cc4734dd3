"""The applier: batches from ``catalog.events.v1`` into the product database.

The events topic is the one hot path of the agents, and Faust's stream machinery
costs about as much per event as the applier itself (a Faust agent doing nothing but
take batches received 5-7k messages/s here, while ``Applier.apply`` alone takes
7-8k/s). So the events are read in batches by librdkafka consumers
(confluent-kafka), each in a thread of the agents process with an applier (a
product-database connection) of its own, beside the Faust app that keeps the
control agent, the timers and the web server. There are two by default
(``GAPLESS_AGENTS_EVENTS_CONSUMERS``): a batch's thread waits on PostgreSQL for
about half of its time while the process's Python idles, so a second consumer applies
its partitions' batches meanwhile (catching up a backlog, one process: 3.0-3.2k
events/s with one consumer, 3.4-4.1k with two, no more with three, on a 2-core
machine). The consumers are members of one group exactly as those of separate
processes are, so what follows holds between them as between processes. What Faust
gave this path is kept, each the same way:

* **ack after commit**: a batch's offsets are stored for Kafka only after
  ``Applier.apply`` returned, i.e. after its transaction committed; if the process
  dies in between, the batch is read again and the inbox absorbs it. librdkafka
  commits the stored offsets to the group once a second, and again when partitions
  are revoked and at close: a request a second rather than one a batch (each an
  append to ``__consumer_offsets``; at 200 events/s, a few events a batch, 33 records
  there instead of 260 over a bench phase). A commit lost with a crash only means
  Kafka's offset lags; where the agents resume is the product database's (next
  point);
* **the database's resume offsets**: on every assignment each partition is set to
  the offset the product database recorded with the last batch applied from it
  (``processors.applier.offsets``), never to Kafka's, which may be ahead of what
  was applied; a partition the database does not know starts at Kafka's committed
  offset, else at the beginning;
* **rebalance handling**: the consumer's group is the app id's own
  (``<GAPLESS_AGENTS_APP_ID>.events``); a batch is applied inside the consumer's
  thread between two polls, so when an assignment is revoked no batch of it is in
  flight, and two workers meeting one stream during a rebalance are serialized by
  the stream's progress-row lock and deduplicated by the inbox, as before.

A transient database failure is retried with jittered backoff without polling (the
batch is kept); an unexpected error too, logged. A stop (SIGTERM) lets the batch
under way commit, then closes the consumer, which leaves the group at once.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from confluent_kafka import (
    OFFSET_STORED,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    Message,
    TopicPartition,
)
from prometheus_client import Counter, Gauge

from db.control.epochs import EpochSource
from db.control.pauses import PauseWatch
from processors.agents import observed
from processors.agents.spans import apply_spans, traceparent_header
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from processors.applier.tallies import BatchResult
from processors.live_first import NO_LIVE_WORK, LiveFirst
from processors.settings import AgentSettings
from schemas import tracing
from schemas.backoff import Reconnect
from schemas.exceptions import RegistryUnavailable
from schemas.registry_codec import codec_for

log = logging.getLogger(__name__)

EVENTS = Counter("gapless_applier_events_total", "Events by outcome", ["outcome"])
ASSIGNED = Gauge(
    "gapless_agents_assigned_partitions",
    "Events-topic partitions this worker's consumers hold (0 between a revocation and"
    " the next assignment, or when the group has more consumers than partitions)",
)


class EventsConsumer:
    """The events topic's consumer thread (``start``, ``stop``)."""

    def __init__(
        self,
        settings: AgentSettings,
        applier: Applier,
        number: int = 0,
        live_first: LiveFirst = NO_LIVE_WORK,
    ) -> None:
        """``number``: which of the process's consumers this is (from 0), for the
        thread's and the Kafka client's names; ``live_first``: the process's, which
        each batch marks (``processors.live_first``)."""
        self._settings = settings
        self._live_first = live_first
        self._applier = applier
        self._topic = settings.events_topic
        self._number = number
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"events-consumer-{number + 1}", daemon=True
        )
        self.batches = 0
        self.assigned = 0  # partitions held now
        # True once the group gave it an assignment (possibly empty) and each of its
        # partitions was set to its resume offset: from then on it applies what arrives.
        # False again when the assignment is revoked or lost (a rebalance, or a broker
        # that went silent past the session timeout) until the next one.
        self.joined = False

    def start(self) -> None:
        self._thread.start()

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop_soon(self) -> None:
        """Ask the thread to stop after the batch under way, without waiting for it."""
        self._stop.set()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self.started:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _consumer(self) -> Consumer:
        s = self._settings
        session_ms = int(s.agents_session_timeout_seconds * 1000)
        return Consumer(
            s.client_config(
                {
                    "group.id": f"{s.agents_app_id}.events",
                    "client.id": f"{s.agents_app_id}-events-{self._number + 1}",
                    # Offsets are stored by hand after each batch's commit, and
                    # librdkafka commits what is stored (``_run``).
                    "enable.auto.commit": True,
                    "auto.commit.interval.ms": 1000,
                    "enable.auto.offset.store": False,
                    "auto.offset.reset": "earliest",
                    "session.timeout.ms": session_ms,
                    "heartbeat.interval.ms": max(1000, session_ms // 4),
                    # A batch retried through a long database outage must not cost the
                    # assignment: Faust's default, five minutes.
                    "max.poll.interval.ms": 300_000,
                    "fetch.min.bytes": 1,
                    "fetch.wait.max.ms": 50,
                    # Prefetch: librdkafka's defaults (100,000 messages, 64 MiB) hold a
                    # minute of a backlog in memory; 20,000 events (a few seconds of
                    # applying, 16 MiB at most) keep the next batches ready.
                    "queued.min.messages": 20_000,
                    "queued.max.messages.kbytes": 16_384,
                }
            )
        )

    def _run(self) -> None:
        consumer = self._consumer()
        consumer.subscribe([self._topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        size = self._settings.agents_batch_size
        within = self._settings.agents_batch_within_seconds
        try:
            while not self._stop.is_set():
                # Wait for one message, then take what has arrived with it (up to a
                # batch): no wait for a batch to fill at a low rate, whole batches
                # from a backlog (librdkafka has prefetched them), and while a batch
                # is applied the next one gathers.
                first = consumer.poll(timeout=0.5)
                if first is None:
                    continue
                rest = consumer.consume(num_messages=size - 1, timeout=within) if size > 1 else []
                polled = [first, *rest]
                messages = [m for m in polled if self._usable(m)]
                if not messages:
                    continue
                traced = tracing.wanted()  # only then is the traceparent header read
                raw = [
                    RawMessage(
                        str(m.topic()),
                        int(m.partition() or 0),
                        int(m.offset() or 0),
                        m.key(),
                        m.value(),
                        published_ms=_timestamp_ms(m),
                        traceparent=traceparent_header(m) if traced else None,
                    )
                    for m in messages
                ]
                started_ns = time.time_ns()
                result = self._apply_until_committed(raw)
                if result is None:
                    return  # stopped before the batch committed: it is read again
                count(result)
                observed.observe(result, self._settings.agents_consumer)
                if result.traced:
                    apply_spans(raw, result.traced, started_ns)
                self.batches += 1
                consumer.store_offsets(offsets=_next_offsets(messages))
        except Exception:
            log.exception("the events consumer stopped on an unexpected error")
            raise
        finally:
            consumer.close()

    @staticmethod
    def _usable(message: Message) -> bool:
        error = message.error()
        if error is None:
            return True
        if error.code() != KafkaError._PARTITION_EOF:
            log.warning("events topic: %s", error)
        return False

    def _apply_until_committed(self, messages: list[RawMessage]) -> BatchResult | None:
        """Retry transient failures (a lost connection) with jittered backoff
        (doubling from 0.1 s, at most ``agents_retry_max_seconds``); None when
        stopped first. Never returns a result without a commit."""
        reconnect = Reconnect(base_seconds=0.1, cap_seconds=self._settings.agents_retry_max_seconds)
        while not self._stop.is_set():
            try:
                with self._live_first.live():
                    return self._applier.apply(messages)
            except (psycopg.OperationalError, psycopg.InterfaceError, RegistryUnavailable) as exc:
                # RegistryUnavailable: a Confluent-framed event whose writer schema the
                # registry could not be asked for; the bytes may be good, so wait.
                pause = reconnect.failed()
                log.warning("batch not applied, retrying in %.1fs: %s", pause, exc)
            except Exception:
                # A bug, not bad data (bad data is quarantined inside apply). Keep the
                # batch uncommitted and retry rather than crash the worker.
                pause = reconnect.failed()
                log.exception("unexpected error applying a batch; retrying in %.1fs", pause)
            self._stop.wait(pause)
        return None

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Set each assigned partition to the product database's resume offset. While
        the database is away this waits for it: starting from Kafka's offsets could
        skip work that rolled back."""
        reconnect = Reconnect(cap_seconds=self._settings.agents_retry_max_seconds)
        while True:
            try:
                stored = self._applier.resume_offsets(self._topic)
                break
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                pause = reconnect.failed()
                log.warning("resume offsets not read, retrying in %.1fs: %s", pause, exc)
                if self._stop.wait(pause):
                    return
        for tp in partitions:
            tp.offset = stored.get(tp.partition, OFFSET_STORED)
        consumer.assign(partitions)
        self.joined = True
        self.assigned = len(partitions)
        log.info(
            "events (consumer %d): assigned %s, resuming from product-database offsets %s",
            self._number + 1,
            sorted(tp.partition for tp in partitions),
            {tp.partition: tp.offset for tp in partitions if tp.partition in stored},
        )

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Between two polls: no batch of these partitions is in flight.
        self.joined = False
        self.assigned = 0
        consumer.unassign()
        log.info(
            "events (consumer %d): revoked %s",
            self._number + 1,
            sorted(tp.partition for tp in partitions),
        )


def _next_offsets(messages: list[Message]) -> list[TopicPartition]:
    last: dict[tuple[str, int], int] = {}
    for m in messages:
        key = (str(m.topic()), int(m.partition() or 0))
        last[key] = max(last.get(key, -1), int(m.offset() or 0))
    return [TopicPartition(t, p, o + 1) for (t, p), o in last.items()]


def register(
    app: Any,
    settings: AgentSettings,
    pauses: PauseWatch | None = None,
    live_first: LiveFirst = NO_LIVE_WORK,
) -> Callable[[], bool]:
    """Start ``agents_events_consumers`` events consumers with the Faust worker and stop
    them at exit; a consumer thread that died of an unexpected error is started again.
    Returns whether every consumer runs and has joined the group (the agents'
    readiness).

    Each consumer has an applier of its own (one product-database connection). A
    batch's transaction spends much of its time in PostgreSQL, with the process's
    Python idle; a second consumer applies its partitions' batches meanwhile. They are
    members of one group like the consumers of separate processes, so everything said
    above holds between them as it does between processes."""
    epochs = EpochSource(settings.control_dsn)
    appliers = [
        Applier(
            settings.product_dsn,
            epochs,
            codec_for(settings),
            consumer=settings.agents_consumer,
            pauses=pauses,
        )
        for _ in range(settings.agents_events_consumers)
    ]

    def new_consumer(number: int) -> EventsConsumer:
        # A restarted consumer takes over its predecessor's applier and connection.
        return EventsConsumer(settings, appliers[number], number, live_first)

    running = [new_consumer(n) for n in range(settings.agents_events_consumers)]
    ASSIGNED.set_function(lambda: sum(c.assigned for c in running))

    @app.task  # type: ignore[untyped-decorator]
    async def consume_events() -> None:
        for consumer in running:
            consumer.start()

    @app.timer(interval=5.0)  # type: ignore[untyped-decorator]
    async def events_consumer_alive() -> None:
        for n, current in enumerate(running):
            if current.started and not current.alive and not current.stopping:
                log.error("events consumer %d is not running; starting it again", n + 1)
                running[n] = new_consumer(n)
                running[n].start()

    def stop() -> None:
        for consumer in running:
            consumer.stop_soon()
        for consumer in running:
            consumer.stop()

    atexit.register(stop)
    return lambda: all(c.alive and c.joined for c in running)


def _timestamp_ms(message: Message) -> int | None:
    """Kafka's timestamp of ``message`` (the producer's create time), if it has one."""
    kind, ms = message.timestamp()
    return int(ms) if kind != TIMESTAMP_NOT_AVAILABLE else None


def count(result: BatchResult) -> None:
    EVENTS.labels("applied").inc(result.applied)
    EVENTS.labels("duplicate").inc(result.duplicates)
    EVENTS.labels("parked").inc(result.parked)
    EVENTS.labels("released").inc(result.released)
    EVENTS.labels("ignored").inc(result.ignored)
    EVENTS.labels("quarantined").inc(result.quarantined)
    EVENTS.labels("deferred_paused").inc(result.deferred)
    EVENTS.labels("held_epoch").inc(result.held)
