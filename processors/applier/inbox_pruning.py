"""Inbox pruning: the inbox kept for the resolver's outbox window, then deleted in
bounded batches (``db.inbox_pruning`` holds the SQL).

A duplicate can reach the applier for as long as the resolver still holds the event
(a relay re-publishing after a crash, the gap closer fetching retained events) and
for as long as Kafka keeps the message. The window is the resolver's retention age
(``GAPLESS_RETENTION_AGE_SECONDS``, the same variable): within it a duplicate is
recognised by its event id and counted as a duplicate; after it, by revision (the
projections never move a row to a lower revision, so it is recorded
``ignored_stale``) and by progress (which never moves backwards), so it still changes
nothing.

It runs as a timer in the agents because the inbox lives in the product database,
which only the agents own; the resolver's pruner runs on the resolver database and
may not reach across.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from db.inbox_pruning import Stream, progress_floors, prune_batch


@dataclass(frozen=True, slots=True)
class InboxRetention:
    age_seconds: float
    batch_size: int = 1000
    max_batches_per_stream: int = 100


class InboxPruner:
    def __init__(self, product_dsn: str, policy: InboxRetention) -> None:
        self._dsn = product_dsn
        self._policy = policy

    def prune_once(self) -> dict[Stream, int]:
        """One pass: per stream, batches from its lowest positions up to its progress
        floor until a batch finds rows still inside the window (or the batch budget is
        spent); returns the rows deleted per stream. Each batch commits on its own."""
        p = self._policy
        deleted: dict[Stream, int] = {}
        with psycopg.connect(self._dsn, autocommit=True) as conn:
            for (consumer, stream), floor in sorted(progress_floors(conn).items()):
                for _ in range(p.max_batches_per_stream):
                    batch = prune_batch(conn, consumer, stream, floor, p.age_seconds, p.batch_size)
                    if batch.deleted:
                        deleted[stream] = deleted.get(stream, 0) + batch.deleted
                    if batch.deleted < p.batch_size:
                        break
        return deleted
