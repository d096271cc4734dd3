"""Timers beside the applier: progress reports and gap closing.

Each worker runs them for every stream of its consumer; the progress-row lock in the
applier's transaction keeps two workers from applying the same stream at once, so
doing the same work twice costs time, never correctness.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from db.epochs import EpochSource
from db.pauses import PauseWatch
from processors.applier.batch import Applier
from processors.gaps import GapCloser
from processors.reporter import ProgressReporter
from processors.resolver_client import ResolverClient, RetryPolicy
from processors.settings import AgentSettings
from schemas.registry_codec import codec_for

log = logging.getLogger(__name__)


def resolver_client(settings: AgentSettings) -> ResolverClient:
    """The one resolver client of an agents process (its calls bounded as configured)."""
    token = settings.resolver_token.get_secret_value() if settings.resolver_token else None
    return ResolverClient(
        settings.resolver_url,
        token,
        retry=RetryPolicy(
            max_attempts=settings.agents_resolver_attempts,
            base_seconds=settings.agents_resolver_retry_base_seconds,
            cap_seconds=16 * settings.agents_resolver_retry_base_seconds,
        ),
        max_concurrency=settings.agents_resolver_concurrency,
    )


def register(
    app: Any, settings: AgentSettings, client: ResolverClient, pauses: PauseWatch | None = None
) -> None:
    reporter = ProgressReporter(settings.product_dsn, client, settings.agents_consumer)
    # Its own applier (own connection): it runs while the agent's batch may be open.
    closer = GapCloser(
        settings.product_dsn,
        client,
        Applier(
            settings.product_dsn,
            EpochSource(settings.control_dsn),
            codec_for(settings),
            consumer=settings.agents_consumer,
            pauses=pauses,
        ),
        settings.agents_consumer,
        threshold_s=settings.agents_gap_threshold_seconds,
        pauses=pauses,
    )

    @app.timer(interval=settings.agents_report_interval_seconds)  # type: ignore[untyped-decorator]
    async def report_progress() -> None:
        try:
            await asyncio.to_thread(reporter.report_once)
        except Exception:
            log.exception("progress report failed; will try again")

    @app.timer(interval=settings.agents_gap_threshold_seconds / 2)  # type: ignore[untyped-decorator]
    async def close_gaps() -> None:
        try:
            await asyncio.to_thread(closer.close_once)
        except Exception:
            log.exception("gap closing failed; will try again")
