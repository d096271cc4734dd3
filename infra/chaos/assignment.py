"""Whether an agents worker that did nothing in the calm had anything to do.

The calm (``campaign._calm``) counts each instance's work over a window in which
every process is up. An agents worker holds only the events partitions the group
gave it, and the live streams of the calm (a few dozen, hashed over six partitions)
can leave one worker's partitions without a new event for the whole window; its
idleness is then no sign of work left unshared. So an idle agents worker is counted
as a violation only when events were waiting in its partitions at the window's end:
the topic's high watermark beyond the offset the product database has applied. A
worker stuck on its partitions still fails the campaign.

Which partitions a worker holds is its own log's last word on them, for each of its
events consumers (``events (consumer N): assigned [...]`` / ``… revoked [...]``,
``processors.agents.events``; a line without the consumer's number is consumer 1's).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable

import psycopg
from confluent_kafka import Consumer, TopicPartition

from processors.applier import offsets
from schemas.settings import KafkaSettings

ASSIGNMENT = re.compile(r"events(?: \(consumer (\d+)\))?: (assigned|revoked) \[([\d, ]*)\]")
WATERMARK_TIMEOUT_S = 10.0


def held_partitions(log_lines: Iterable[str]) -> set[int]:
    """The events partitions a worker holds: for each of its consumers, what the last
    assignment or revocation its log records left (none before the first)."""
    held: dict[str, set[int]] = {}
    for line in log_lines:
        match = ASSIGNMENT.search(line)
        if match is None:
            continue
        consumer, change, listed = match.group(1) or "1", match.group(2), match.group(3)
        named = {int(p) for p in listed.split(",") if p.strip()}
        held[consumer] = named if change == "assigned" else held.get(consumer, set()) - named
    return set().union(*held.values())


def waiting_events(
    kafka: KafkaSettings, product_dsn: str, topic: str, consumer: str, partitions: set[int]
) -> int:
    """Events in ``partitions`` of ``topic`` beyond what the product database applied."""
    if not partitions:
        return 0
    with psycopg.connect(product_dsn, connect_timeout=5) as conn:
        applied = offsets.load(conn, consumer, topic)
    reader = Consumer(
        kafka.client_config({"group.id": f"chaos-watermarks-{uuid.uuid4()}"}),
    )
    try:
        waiting = 0
        for partition in sorted(partitions):
            low, high = reader.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=WATERMARK_TIMEOUT_S
            )
            waiting += max(0, high - applied.get(partition, low))
        return waiting
    finally:
        reader.close()
