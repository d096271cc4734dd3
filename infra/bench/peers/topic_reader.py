"""What arrived on a peers topic: every message's value bytes and the broker's append
time.

The peers' topics are created with ``message.timestamp.type=LogAppendTime``, so a
message's timestamp is the moment the broker appended it, whatever its producer
stamped: the same clock for our relay and for Kafka Connect, on the same machine as
the writers' commit clock. Messages are told apart by their value bytes, which are
the same bytes in both outboxes and unique per event (each holds its event id).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from infra.bench.sandbox import PARTITIONS

OFFSET_BEGINNING = -2
TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime"}


def create_topics(bootstrap: str, names: list[str], partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    new = [
        NewTopic(t, num_partitions=partitions, replication_factor=1, config=TOPIC_CONFIG)
        for t in names
    ]
    for future in admin.create_topics(new).values():
        future.result(timeout=30)


def delete_topics(bootstrap: str, names: list[str]) -> None:
    if not names:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    for future in admin.delete_topics(names).values():
        future.result(timeout=30)


@dataclass
class TopicReader:
    """Reads one topic from its beginning; call ``read`` repeatedly."""

    bootstrap: str
    topic: str
    group: str
    first_seen_ms: dict[bytes, int] = field(default_factory=dict)
    messages: int = 0
    _consumer: Consumer | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
                "log_level": 0,
            }
        )
        self._consumer.assign(
            [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
        )

    @property
    def distinct(self) -> int:
        return len(self.first_seen_ms)

    @property
    def duplicates(self) -> int:
        return self.messages - self.distinct

    def read(self, timeout: float = 0.01) -> int:
        """Take what the broker has now (waiting up to ``timeout``, which ``consume``
        waits out unless 10,000 messages come first: short, so that the kill test sees
        the half-way mark soon after it passes); returns how many."""
        assert self._consumer is not None
        batch = self._consumer.consume(num_messages=10_000, timeout=timeout)
        taken = 0
        for msg in batch:
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(f"reading {self.topic}: {error}")
            value = msg.value()
            if value is None:
                continue
            taken += 1
            self.messages += 1
            self.first_seen_ms.setdefault(value, msg.timestamp()[1])
        return taken

    def read_until(
        self,
        done: Callable[[TopicReader], bool],
        timeout: float,
        alive: Callable[[], None] = lambda: None,
    ) -> None:
        """Read until ``done(self)``; ``alive`` raises if a process it waits on died."""
        deadline = time.monotonic() + timeout
        while not done(self):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.topic}: {self.distinct} distinct messages after {timeout:.0f}s"
                )
            alive()
            self.read()

    def drain(self, quiet: float = 1.0) -> None:
        """Read until nothing more arrives for ``quiet`` seconds (late duplicates)."""
        last = time.monotonic()
        while time.monotonic() - last < quiet:
            if self.read(timeout=0.2):
                last = time.monotonic()

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


@dataclass(frozen=True, slots=True)
class Drain:
    """A backlog as it arrived: how many rows, over how long (broker time)."""

    rows: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def drain_of(reader: TopicReader, expected: set[bytes]) -> Drain:
    """The expected rows' arrival span, first to last append (ms resolution; a span
    of one millisecond at least). Raises if any expected row is missing."""
    missing = len(expected - reader.first_seen_ms.keys())
    if missing:
        raise RuntimeError(f"{reader.topic}: {missing} of {len(expected)} rows never arrived")
    stamps = [reader.first_seen_ms[v] for v in expected]
    span_ms = max(max(stamps) - min(stamps), 1)
    return Drain(len(expected), span_ms / 1000)
