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
import uuid
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaError, Producer

from schemas.jobs import JobMessage
from schemas.settings import KafkaConnection, client_config

log = logging.getLogger(__name__)

POLL_SECONDS = 0.1
"""The poller's wait for a report when none is due (the bound on noticing close)."""


class JobEnqueuer:
    """One idempotent producer per process; ``send`` is safe from many threads.

    One thread of its own serves every delivery report (``poll``), and each ``send``
    waits on its own condition until its reports are in: a caller is woken by its
    report, not by the end of another caller's poll.

    Made with ``open=False`` (as the resolver API assembles its backends), it creates
    neither its producer nor its thread until ``open``: an app built and never
    started (a test reading its routes) reaches no broker."""

    def __init__(
        self, kafka: KafkaConnection, topic: str, timeout_seconds: float, open: bool = True
    ) -> None:
        self.topic = topic
        self._kafka = kafka
        self._timeout = timeout_seconds
        self._producer: Producer | None = None
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="intake-enqueue", daemon=True)
        if open:
            self.open()

    def open(self) -> None:
        """Create the producer and start its poller (once)."""
        if self._producer is not None:
            return
        self._producer = Producer(
            client_config(
                self._kafka,
                {
                    "client.id": "gapless-intake",
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 5,
                    # A delivery report (success or failure) arrives within this bound.
                    "message.timeout.ms": int(self._timeout * 1000),
                    # librdkafka's own log lines go through logging, not raw stderr.
                    "logger": log,
                },
            )
        )
        self._poller.start()

    def _started(self) -> Producer:
        if self._producer is None:
            raise RuntimeError("JobEnqueuer used before open()")
        return self._producer

    def _poll(self) -> None:
        producer = self._started()
        while not self._closing.is_set():
            producer.poll(POLL_SECONDS)

    def send(self, messages: Sequence[JobMessage]) -> dict[uuid.UUID, str | None]:
        """Send and wait for the broker's answers: per job, None when confirmed, or a
        short error. Never raises for a delivery failure."""
        producer = self._started()
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
                producer.produce(
                    self.topic,
                    key=message.key(),
                    value=message.encode(),
                    on_delivery=report(message.job_id),
                )
            except (BufferError, Exception) as exc:  # KafkaException: config, size
                with done:
                    waiting.discard(message.job_id)
                    results[message.job_id] = f"kafka: {type(exc).__name__}: {exc}"
        with done:
            done.wait_for(lambda: not waiting, timeout=self._timeout + 2.0)
            for job in waiting:
                results[job] = "kafka: no delivery report in time"
        return results

    def close(self) -> None:
        """Flush what was sent and stop the poller; nothing to do if never opened."""
        if self._producer is None:
            return
        self._closing.set()
        self._poller.join()
        self._producer.flush(self._timeout)
