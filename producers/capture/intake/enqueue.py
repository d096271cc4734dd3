"""Putting job messages on the jobs topic, and recording what the broker confirmed.

A message is enqueued once the broker has acknowledged it (``acks=all``, idempotent
producer); only then does its job move from ``pending`` to ``enqueued``. Anything
else (a broker down, a timeout, a full local queue) leaves the job pending with the
attempt counted and the next attempt pushed out, and the sweeper picks it up. A job
is never lost, and a message may be sent twice (after a crash between the broker's
acknowledgement and the status update): the worker dedupes by job id.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaError, Producer

from schemas.jobs import JobMessage
from schemas.settings import KafkaConnection, client_config

log = logging.getLogger(__name__)


class JobEnqueuer:
    """One idempotent producer per process; ``send`` is safe from many threads."""

    def __init__(self, kafka: KafkaConnection, topic: str, timeout_seconds: float) -> None:
        self.topic = topic
        self._timeout = timeout_seconds
        self._producer = Producer(
            client_config(
                kafka,
                {
                    "client.id": "gapless-intake",
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 5,
                    # A delivery report (success or failure) arrives within this bound.
                    "message.timeout.ms": int(timeout_seconds * 1000),
                    # librdkafka's own log lines go through logging, not raw stderr.
                    "logger": log,
                },
            )
        )
        self._lock = threading.Lock()

    def send(self, messages: Sequence[JobMessage]) -> dict[uuid.UUID, str | None]:
        """Send and wait for the broker's answers: per job, None when confirmed, or a
        short error. Never raises for a delivery failure."""
        results: dict[uuid.UUID, str | None] = {}
        waiting: set[uuid.UUID] = set()
        done = threading.Condition(self._lock)

        def report(job: uuid.UUID) -> Any:
            def on_delivery(err: KafkaError | None, _msg: Any) -> None:
                with done:
                    results[job] = None if err is None else f"kafka: {err.str()}"
                    waiting.discard(job)
                    done.notify_all()

            return on_delivery

        for message in messages:
            try:
                with done:
                    waiting.add(message.job_id)
                self._producer.produce(
                    self.topic,
                    key=message.key(),
                    value=message.encode(),
                    on_delivery=report(message.job_id),
                )
            except (BufferError, Exception) as exc:  # KafkaException: config, size
                with done:
                    waiting.discard(message.job_id)
                    results[message.job_id] = f"kafka: {type(exc).__name__}: {exc}"
        deadline = time.monotonic() + self._timeout + 2.0
        while True:
            with done:
                if not waiting:
                    break
            if time.monotonic() > deadline:
                break
            # Any thread's poll serves every thread's delivery reports.
            self._producer.poll(0.05)
        with done:
            for job in waiting:
                results[job] = "kafka: no delivery report in time"
        return results

    def close(self) -> None:
        self._producer.flush(self._timeout)
