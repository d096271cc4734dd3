"""Publishing stored outbox bytes with an idempotent confluent-kafka producer."""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import KafkaError, Message, Producer
from opentelemetry.trace import Span

from db.resolver.outbox import StoredRow
from producers.relay.exceptions import PublishFailed
from producers.relay.spans import end_publish_spans, publish_span
from schemas.codec import HEADER_EVENT_ID, HEADER_HISTORY_EPOCH, HEADER_TRACEPARENT, KafkaHeaders
from schemas.settings import KafkaConnection, client_config
from schemas.tracing import wanted


def producer_config(kafka: KafkaConnection, delivery_timeout_s: float) -> dict[str, object]:
    return client_config(
        kafka,
        # Idempotence + acks=all: the broker drops the producer's own retries, and a
        # message counts as delivered only once every in-sync replica has it.
        {
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "compression.type": "lz4",
            # murmur2 is the partitioner Java clients use, so any producer of this key
            # lands the stream in the same partition.
            "partitioner": "murmur2_random",
            "delivery.timeout.ms": int(delivery_timeout_s * 1000),
        },
    )


class _Window:
    """The delivery reports of the messages sent between two confirms."""

    __slots__ = ("delivered", "errors", "sent", "spans")

    def __init__(self) -> None:
        self.sent = 0
        self.delivered = 0
        self.errors: list[KafkaError] = []
        self.spans: list[Span] = []  # ``relay publish`` spans, ended by ``confirm``

    def report(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.delivered += 1


class Publisher:
    """Sends batches and confirms them only when every message has a delivery report.

    ``send`` hands rows to the producer without waiting, so the caller can read the
    next rows from the database while librdkafka ships these; ``confirm`` waits for
    every report of what was sent since the last ``confirm``. ``publish`` is both.
    """

    def __init__(
        self, kafka: KafkaConnection, topic: str, delivery_timeout_s: float = 30.0
    ) -> None:
        self.topic = topic
        self._timeout = delivery_timeout_s
        self._producer = Producer(producer_config(kafka, delivery_timeout_s))
        self._window = _Window()

    def send(self, rows: Sequence[StoredRow]) -> None:
        """Produce ``rows`` in order; returns once the producer holds them all.

        The headers are ``kafka_headers(event_id, history_epoch, …)``, built here a row
        at a time (the epoch's header shared while it stays the same, as it does in
        a stream): this loop is the relay's own cost per message beside librdkafka's,
        so it reads the rows by index (``StoredRow``). A row the writer traced also
        gets the ``traceparent`` header: its own ``relay publish`` span's when this
        relay traces (``spans``), else the stored one, unchanged.
        """
        window = self._window
        produce = self._producer.produce
        topic = self.topic
        report = window.report
        traced = wanted()
        last_epoch = -1
        epoch_header: tuple[str, str | bytes | None] = (HEADER_HISTORY_EPOCH, None)
        for row in rows:
            if row[2] != last_epoch:
                last_epoch = row[2]
                epoch_header = (HEADER_HISTORY_EPOCH, str(last_epoch).encode())
            headers: KafkaHeaders = [(HEADER_EVENT_ID, row[1].encode()), epoch_header]
            if row[6] is not None:  # the write's traceparent
                traceparent = row[6]
                if traced:
                    span, traceparent = publish_span(row, traceparent, topic)
                    window.spans.append(span)
                headers.append((HEADER_TRACEPARENT, traceparent.encode()))
            while True:
                try:
                    produce(topic, row[4], row[3], headers=headers, on_delivery=report)
                    break
                except BufferError:
                    # Local queue full: serve delivery callbacks to make room.
                    self._producer.poll(0.05)
        window.sent += len(rows)

    def confirm(self) -> None:
        """Wait for the delivery report of everything sent since the last confirm.

        Raises ``PublishFailed`` if any report is an error or missing after the
        timeout; the caller then leaves the published positions where they were and
        retries later (some of the rows may have reached Kafka: the consumers' inbox
        absorbs the repeats).
        """
        # Reports that arrive after a confirm gave up go to that window, never to
        # the next one's counts.
        window, self._window = self._window, _Window()
        remaining = self._producer.flush(self._timeout)
        if window.spans:
            unconfirmed = window.errors or remaining or window.delivered != window.sent
            end_publish_spans(window.spans, "not confirmed by Kafka" if unconfirmed else None)
        if window.errors:
            raise PublishFailed(
                f"{len(window.errors)} deliveries failed, first: {window.errors[0]}"
            )
        if remaining or window.delivered != window.sent:
            raise PublishFailed(
                f"{window.sent - window.delivered} of {window.sent} messages had no delivery"
                f" report after {self._timeout}s"
            )

    def publish(self, rows: Sequence[StoredRow]) -> None:
        """Produce ``rows`` in order and wait for all their delivery reports."""
        self.send(rows)
        self.confirm()

    def close(self) -> None:
        self._producer.flush(self._timeout)
