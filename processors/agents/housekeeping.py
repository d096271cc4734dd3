"""The inbox pruning timer beside the applier (``processors.applier.inbox_pruning``).

Every worker runs it; two passes at once delete disjoint or already-deleted rows,
so running it twice costs time, never correctness.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from prometheus_client import Counter

from processors.applier.inbox_pruning import InboxPruner, InboxRetention
from processors.settings import AgentSettings

log = logging.getLogger(__name__)

PRUNED = Counter("gapless_inbox_pruned_total", "Inbox rows deleted after the retention window")


def register(app: Any, settings: AgentSettings) -> None:
    pruner = InboxPruner(
        settings.product_dsn,
        InboxRetention(
            settings.retention_age_seconds,
            settings.agents_inbox_prune_batch_size,
            fenced_seconds=settings.fenced_retention_seconds,
        ),
    )

    @app.timer(interval=settings.agents_inbox_prune_interval_seconds)  # type: ignore[untyped-decorator]
    async def prune_inbox() -> None:
        try:
            deleted = await asyncio.to_thread(pruner.prune_once)
        except Exception:  # the database away, say: the next pass tries again
            log.exception("inbox pruning failed; will try again")
            return
        if deleted:
            PRUNED.inc(sum(deleted.values()))
            log.info("pruned %d inbox rows in %d streams", sum(deleted.values()), len(deleted))
