"""How long the events the agents settle took to get here, as histograms per
consumer: from the writer's commit (the event's ``occurred_at``) and from Kafka's
timestamp of the relay's send, to the commit of the batch that applied them. A
released parked event counts its whole wait from its commit; it has no Kafka time
of its own in the batch that released it."""

from __future__ import annotations

import time

from processors.applier.tallies import BatchResult
from schemas.latency import Latencies

COMMIT_TO_APPLIED = Latencies(
    "gapless_agents_commit_to_applied_seconds",
    "Seconds from an event's commit by the writer to the commit of the batch that applied it",
    ["consumer"],
)
PUBLISHED_TO_APPLIED = Latencies(
    "gapless_agents_published_to_applied_seconds",
    "Seconds from Kafka's timestamp of an event (the relay's send) to the commit of the"
    " batch that applied it",
    ["consumer"],
)


def observe(result: BatchResult, consumer: str, now: float | None = None) -> None:
    """Count the events ``result`` settled; ``now``: when its batch committed."""
    if not result.settled:
        return
    at = time.time() if now is None else now
    COMMIT_TO_APPLIED.observe([at - occurred for occurred, _ in result.settled], consumer)
    PUBLISHED_TO_APPLIED.observe(
        [at - published for _, published in result.settled if published is not None], consumer
    )
