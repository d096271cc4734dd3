"""Timers beside the applier: progress reports and gap closing.

Both cover every stream of the consumer, so with several agents workers only the one
holding the consumer's recovery leadership (``db.leadership``) runs them; the others skip
each tick until the holder dies or loses its connection, and the first to ask after
that takes over. Leadership saves time, correctness does not rest on it: the
progress-row lock in the applier's transaction keeps two workers from applying the
same stream at once, and the resolver ignores progress lower than it holds, so the
moment of a hand-over, when two may both run one pass, doubles nothing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from prometheus_client import Gauge

from db.control.epochs import EpochSource
from db.control.pauses import PauseWatch
from db.leadership import Leadership
from processors.applier.batch import Applier
from processors.gaps import GapCloser
from processors.reporter import ProgressReporter
from processors.resolver_client import ResolverClient, RetryPolicy
from processors.settings import AgentSettings
from schemas.registry_codec import codec_for

log = logging.getLogger(__name__)

LEASE_HELD = Gauge(
    "gapless_recovery_lease_held",
    "1 while this agents worker holds its consumer's recovery leadership (it runs the"
    " progress reporter and the gap closer)",
)


def recovery_leadership(settings: AgentSettings) -> Leadership:
    return Leadership(settings.product_dsn, f"gapless.recovery:{settings.agents_consumer}")


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
    leadership = recovery_leadership(settings)
    # Its own epoch source: it runs in another thread than the agent's appliers.
    reporter = ProgressReporter(
        settings.product_dsn, client, settings.agents_consumer, EpochSource(settings.control_dsn)
    )
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
            if not await _holding(leadership):
                reporter.forget()
                return
            await asyncio.to_thread(reporter.report_once)
        except Exception:
            log.exception("progress report failed; will try again")

    @app.timer(interval=settings.agents_gap_threshold_seconds / 2)  # type: ignore[untyped-decorator]
    async def close_gaps() -> None:
        try:
            if not await _holding(leadership):
                return
            await asyncio.to_thread(closer.close_once)
        except Exception:
            log.exception("gap closing failed; will try again")


async def _holding(leadership: Leadership) -> bool:
    held = await asyncio.to_thread(leadership.held)
    LEASE_HELD.set(1 if held else 0)
    return held
