"""Hearing PAUSE and RESUME on the control topic (``GAPLESS_CONTROL_TOPIC``).

Every process that honours pauses reads the whole control topic from its end, with
no consumer group (each process must hear each command; none commits offsets), and
wakes its ``PauseWatch`` on each PAUSE or RESUME, which then re-reads the pauses
from the control database. The topic only makes a pause prompt: a message lost, or
a broker away, delays the pause to the watch's next poll, never loses it.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable

from confluent_kafka import OFFSET_END, Consumer, KafkaException, TopicPartition

from db.control.pauses import PauseWatch
from schemas import control
from schemas.exceptions import CodecError
from schemas.settings import KafkaConnection, client_config

log = logging.getLogger(__name__)


class ControlListener:
    def __init__(self, watch: PauseWatch, kafka: KafkaConnection, topic: str) -> None:
        self._watch = watch
        self._kafka = kafka
        self._topic = topic
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ControlListener:
        self._thread = threading.Thread(target=self._run, name="control-listener", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ask the thread to end (within a poll, about a second); not waited for, so
        a process or a test client stops at once."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except KafkaException as exc:  # the database poll covers the outage
                log.warning("control topic not read, trying again: %s", exc)
                self._stop.wait(5)

    def _listen(self) -> None:
        consumer = Consumer(
            client_config(
                self._kafka,
                {
                    "group.id": f"pause-listener-{uuid.uuid4()}",  # never joined: assign()
                    "enable.auto.commit": False,
                    "enable.partition.eof": False,
                },
            )
        )
        try:
            metadata = consumer.list_topics(self._topic, timeout=10)
            described = metadata.topics.get(self._topic)
            if described is None or described.error is not None or not described.partitions:
                raise KafkaException(f"control topic {self._topic} not found")
            consumer.assign(
                [TopicPartition(self._topic, p, OFFSET_END) for p in described.partitions]
            )
            while not self._stop.is_set():
                message = consumer.poll(0.5)
                if message is None or message.error() is not None:
                    continue
                value = message.value()
                if value is None:
                    continue
                try:
                    command = control.decode(value)
                except CodecError:
                    continue  # not ours to judge: the agents log it
                if command.kind in ("pause", "resume"):
                    self._watch.notify()
        finally:
            consumer.close()


def listener(kafka: KafkaConnection, topic: str) -> Callable[[PauseWatch], Callable[[], None]]:
    """What a ``PauseWatch`` calls at its start (``listen``): a listener for it,
    started; returns its stop."""

    def start(watch: PauseWatch) -> Callable[[], None]:
        return ControlListener(watch, kafka, topic).start().stop

    return start
