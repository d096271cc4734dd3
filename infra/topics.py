"""Creating the Kafka topics the pipeline uses (idempotent).

Every topic gets ``GAPLESS_KAFKA_REPLICATION_FACTOR`` replicas and
``min.insync.replicas`` (``KafkaSettings.min_insync_replicas``) as a setting of its
own, so its guarantee does not hang on the brokers' defaults: with three replicas and
two in sync, an ``acks=all`` write is on two brokers before the producer hears of it,
and one broker may die without losing it or stopping writes.

- the events topic: the relay's writes are what the agents apply; a write acknowledged
  and then lost would be refetched from the resolver, but only if some later event
  revealed the gap, so it must not be lost;
- the control topic: operators' rebuild commands, one partition (their order is the
  order they were given), the same replication: a command acknowledged is one the
  agents will see;
- the rebuild status topic: the agents' own reports, replicated alike;
- the intake jobs topic: an acknowledged ``POST /v1/captures`` is a promise that the
  capture will be worked; losing its job would break it.

Unclean leader election stays off (the brokers' default): a replica that was not in
sync never becomes a leader, so no acknowledged write is truncated away.
"""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from schemas.errors import GaplessError
from schemas.settings import KafkaSettings
from schemas.topics import JOBS_TOPIC


class TooFewBrokers(GaplessError):
    """The cluster has fewer brokers than the replication factor asked for."""

    code = "KAFKA_TOO_FEW_BROKERS"


def wanted_topics(settings: KafkaSettings) -> dict[str, int]:
    """Every topic gapless creates, with its partition count."""
    return {
        settings.events_topic: settings.events_partitions,
        settings.control_topic: 1,
        settings.rebuild_status_topic: 1,
        JOBS_TOPIC: settings.events_partitions,
    }


def topic_config(settings: KafkaSettings) -> dict[str, str]:
    return {"min.insync.replicas": str(settings.min_insync_replicas)}


def ensure_topics(settings: KafkaSettings, echo: Callable[[str], None] = lambda _: None) -> None:
    """Create missing topics; existing ones are left as they are, and named when they
    have fewer replicas than asked for (adding replicas is a reassignment, an
    operator's decision)."""
    admin = AdminClient(settings.client_config())
    metadata = admin.list_topics(timeout=15)
    rf = settings.kafka_replication_factor
    if len(metadata.brokers) < rf:
        raise TooFewBrokers(
            f"GAPLESS_KAFKA_REPLICATION_FACTOR={rf} but GAPLESS_KAFKA_BOOTSTRAP's cluster has"
            f" {len(metadata.brokers)} broker(s): set it to at most that, or point"
            " GAPLESS_KAFKA_BOOTSTRAP at the cluster"
        )
    wanted = wanted_topics(settings)
    for name in wanted:
        found = metadata.topics.get(name)
        if found is None or not found.partitions:
            continue
        replicas = min(len(p.replicas) for p in found.partitions.values())
        if replicas < rf:
            echo(f"topic {name} exists with {replicas} replica(s), fewer than {rf}: left as it is")
    new = [
        NewTopic(
            name, num_partitions=partitions, replication_factor=rf, config=topic_config(settings)
        )
        for name, partitions in wanted.items()
        if name not in metadata.topics
    ]
    if not new:
        return
    for name, future in admin.create_topics(new).items():
        try:
            future.result(timeout=30)
            echo(f"created topic {name} ({rf} replica(s), {settings.min_insync_replicas} in sync)")
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
