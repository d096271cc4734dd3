"""The housekeeping timers beside the applier: inbox pruning
(``processors.applier.inbox_pruning``) and the sweeps of finished rebuilds, control
answers, resolved quarantine entries and gone processes (``processors.sweeps``).

Every worker runs them; two passes at once delete disjoint or already-deleted rows,
so running them twice costs time, never correctness.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from prometheus_client import Counter

from processors.applier.inbox_pruning import InboxPruner, InboxRetention
from processors.settings import AgentSettings
from processors.sweeps import SweepPolicy, sweep_once

log = logging.getLogger(__name__)

PRUNED = Counter("gapless_inbox_pruned_total", "Inbox rows deleted after the retention window")
SWEPT = Counter(
    "gapless_rows_swept_total",
    "Rows deleted after their retention: finished rebuilds, control answers, resolved"
    " quarantine entries, gone processes and their pause acknowledgements",
    ["what"],
)


def register(app: Any, settings: AgentSettings) -> None:
    pruner = InboxPruner(
        settings.product_dsn,
        InboxRetention(
            settings.retention_age_seconds,
            settings.agents_inbox_prune_batch_size,
            fenced_seconds=settings.fenced_retention_seconds,
        ),
    )
    policy = SweepPolicy(
        settings.rebuild_retention_seconds,
        settings.quarantine_retention_seconds,
        settings.process_retention_seconds,
        settings.agents_sweep_batch_size,
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

    @app.timer(interval=settings.agents_sweep_interval_seconds)  # type: ignore[untyped-decorator]
    async def sweep_past_retention() -> None:
        try:
            swept = await asyncio.to_thread(
                sweep_once, settings.product_dsn, settings.control_dsn, policy
            )
        except Exception:  # the database away, say: the next pass tries again
            log.exception("housekeeping sweep failed; will try again")
            return
        for what, count in swept.items():
            if count:
                SWEPT.labels(what).inc(count)
