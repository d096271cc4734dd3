"""Publishing stored outbox bytes with an idempotent confluent-kafka producer."""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import KafkaError, Message, Producer

from db.outbox import OutboxRow
from producers.relay.exceptions import PublishFailed
from schemas.settings import KafkaConnection, client_config


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


class Publisher:
    """Sends a batch and returns only when every message of it has a delivery report."""

    def __init__(
        self, kafka: KafkaConnection, topic: str, delivery_timeout_s: float = 30.0
    ) -> None:
        self.topic = topic
        self._timeout = delivery_timeout_s
        self._producer = Producer(producer_config(kafka, delivery_timeout_s))

    def publish(self, rows: Sequence[OutboxRow]) -> None:
        """Produce ``rows`` in order and wait for all delivery reports.

        Raises ``PublishFailed`` if any report is an error or missing after the
        timeout; the caller then leaves the published position where it was and
        retries later (some of the rows may have reached Kafka: the consumers' inbox
        absorbs the repeats).
        """
        errors: list[KafkaError] = []
        delivered = 0

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            nonlocal delivered
            if err is not None:
                errors.append(err)
            else:
                delivered += 1

        for row in rows:
            while True:
                try:
                    self._producer.produce(
                        self.topic,
                        key=row.key,
                        value=row.value,
                        headers=row.headers,
                        on_delivery=on_delivery,
                    )
                    break
                except BufferError:
                    # Local queue full: serve delivery callbacks to make room.
                    self._producer.poll(0.05)
        remaining = self._producer.flush(self._timeout)
        if errors:
            raise PublishFailed(f"{len(errors)} deliveries failed, first: {errors[0]}")
        if remaining or delivered != len(rows):
            raise PublishFailed(
                f"{len(rows) - delivered} of {len(rows)} messages had no delivery report "
                f"after {self._timeout}s"
            )

    def close(self) -> None:
        self._producer.flush(self._timeout)
