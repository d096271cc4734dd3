"""Creating the Kafka topics the pipeline uses (idempotent)."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from schemas.settings import KafkaSettings
from schemas.topics import JOBS_TOPIC


def ensure_topics(settings: KafkaSettings, echo: Callable[[str], None] = lambda _: None) -> None:
    """Create missing topics; existing ones are left as they are."""
    admin = AdminClient(settings.client_config())
    existing = set(admin.list_topics(timeout=15).topics)
    wanted = {
        settings.events_topic: settings.events_partitions,
        settings.control_topic: 1,
        settings.rebuild_status_topic: 1,
        JOBS_TOPIC: settings.events_partitions,
    }
    new = [
        NewTopic(name, num_partitions=partitions, replication_factor=1)
        for name, partitions in wanted.items()
        if name not in existing
    ]
    if not new:
        return
    for name, future in admin.create_topics(new).items():
        try:
            future.result(timeout=30)
            echo(f"created topic {name}")
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
