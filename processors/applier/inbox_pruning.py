"""Inbox pruning: the inbox kept for the resolver's outbox window, then deleted in
bounded batches (``db.product.inbox_pruning`` holds the SQL).

A duplicate can reach the applier for as long as the resolver still holds the event
(a relay re-publishing after a crash, the gap closer fetching retained events) and
for as long as Kafka keeps the message. The window is the resolver's retention age
(``GAPLESS_RETENTION_AGE_SECONDS``, the same variable): within it a duplicate is
recognised by its event id and counted as a duplicate; after it, by revision (the
projections never move a row to a lower revision, so it is recorded
``ignored_stale``) and by progress (which never moves backwards), so it still changes
nothing.

A superseded epoch (one a settled fence made history) is left to the second half
of each pass: its inbox is kept whole for ``GAPLESS_FENCED_RETENTION_SECONDS`` from
the settlement, and each row at least that long from its own decision, so the audit
of every old-epoch delivery stays readable; then it goes in bounded batches, above
progress too (``db.product.inbox_pruning`` says what stays).

It runs as a timer in the agents because the inbox lives in the product database,
which only the agents own; the resolver's pruner runs on the resolver database and
may not reach across.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from db.product.inbox_pruning import (
    Stream,
    old_epoch_streams,
    progress_floors,
    prune_batch,
    prune_old_epoch_batch,
)
from db.settings import FENCED_RETENTION_SECONDS


@dataclass(frozen=True, slots=True)
class InboxRetention:
    age_seconds: float
    batch_size: int = 1000
    max_batches_per_stream: int = 100
    fenced_seconds: float = FENCED_RETENTION_SECONDS


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
            for consumer, stream in old_epoch_streams(conn, p.fenced_seconds):
                self._prune_old_epoch(conn, consumer, stream, deleted)
        return deleted

    def _prune_old_epoch(
        self, conn: psycopg.Connection, consumer: str, stream: Stream, deleted: dict[Stream, int]
    ) -> None:
        """A superseded stream past its period: batches in position order until one
        looks at fewer rows than it may (the end of the stream's inbox) or the batch
        budget is spent; the next pass starts from its lowest position again, so rows
        still inside the period are looked at again and go once they are old enough."""
        p = self._policy
        after = 0
        for _ in range(p.max_batches_per_stream):
            batch = prune_old_epoch_batch(
                conn, consumer, stream, after, p.fenced_seconds, p.batch_size
            )
            if batch.deleted:
                deleted[stream] = deleted.get(stream, 0) + batch.deleted
            if batch.looked_at < p.batch_size or batch.last_position is None:
                return
            after = batch.last_position
