"""The control agent and the rebuild timer (thin: the work is in ``processors.rebuild``).

The agent reads the control topic (``GAPLESS_CONTROL_TOPIC``) and records each command
once; the timer (``step_each``) moves every unfinished rebuild on, step by step while
each step completes a phase (``Orchestrator.run``), under the rebuild's claim, so
with several workers each rebuild has one orchestrator at a time, then removes what
finished rebuilds left (``processors.rebuild.cleanup``, bounded per pass). Each
rebuild is guarded on its own: an error escaping one is logged and counted
(``gapless_rebuild_step_errors_total``) and the next rebuild, and the cleanup, run
all the same, so one rebuild can never wedge the others. A command that does not
decode is logged and skipped with its code (it names no rebuild to fail).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from typing import Any

import psycopg
from prometheus_client import Counter

from db.control.epochs import EpochSource
from db.objects import s3_client
from db.product import rebuilds as sql
from processors.live_first import NO_LIVE_WORK, LiveFirst
from processors.rebuild.cleanup import sweep
from processors.rebuild.orchestrator import Orchestrator
from processors.rebuild.requests import accept
from processors.rebuild.status import StatusPublisher, refusal
from processors.resolver_client import ResolverClient
from processors.settings import AgentSettings
from schemas import control
from schemas.errors import GaplessError
from schemas.exceptions import CodecError
from schemas.registry_codec import codec_for

log = logging.getLogger(__name__)

STEP_ERRORS = Counter(
    "gapless_rebuild_step_errors_total",
    "Errors that escaped one rebuild's step or the rebuild cleanup (the others went on),"
    " by error code (the exception's class name when it has none)",
    ["code"],
)


def _failed(what: str, exc: Exception) -> None:
    code = exc.code if isinstance(exc, GaplessError) else type(exc).__name__
    STEP_ERRORS.labels(code).inc()
    log.error("%s failed (%s); the other rebuilds go on", what, code, exc_info=exc)


def step_each(
    product_dsn: str,
    orchestrator: Orchestrator,
    client: ResolverClient,
    *,
    steps: int = 8,
    keep: int = 0,
) -> None:
    """One pass of the timer: every unfinished rebuild moved on (``steps`` at most
    each), then one bounded cleanup pass. An error of one rebuild is logged and counted
    and stops neither the next rebuild nor the cleanup; it is tried again next pass."""
    with psycopg.connect(product_dsn) as conn:
        unfinished = sql.unfinished(conn)
    for row in unfinished:
        try:
            orchestrator.run(row.rebuild_id, steps)
        except Exception as exc:  # one rebuild must never stop the others
            _failed(f"rebuild {row.rebuild_id}", exc)
    try:
        swept = sweep(product_dsn, client, keep=keep)
    except Exception as exc:  # logged and counted, tried again next pass
        _failed("rebuild cleanup", exc)
        return
    if swept.rebuilds_cleaned or swept.generation_rows:
        log.info(
            "rebuild cleanup: %d rebuild(s) cleaned, %d shadow and %d retired-generation"
            " rows removed%s",
            swept.rebuilds_cleaned,
            swept.shadow_rows,
            swept.generation_rows,
            " (more next pass)" if swept.more else "",
        )


async def carry_out(
    record: Callable[[bytes], None], value: bytes, retry_seconds: float = 1.0
) -> None:
    """Record one command, going again while the product database does not answer.

    The command is acknowledged (the agent's loop moves on) only once it is recorded:
    an error escaping here would crash the agent and Faust would still commit the
    offset, losing the command (a rebuild asked for while PostgreSQL restarted was
    never started). Recording a command twice changes nothing (``accept``)."""
    while True:
        try:
            await asyncio.to_thread(record, value)
            return
        except psycopg.OperationalError as exc:
            log.warning("control command not recorded yet, again shortly: %s", exc)
            await asyncio.sleep(retry_seconds)


def _export_fetcher(settings: AgentSettings) -> Callable[[str], bytes]:
    """Reads an export's object by its key (the orchestrator's ``fetch``)."""
    s3 = s3_client(settings)

    def fetch(key: str) -> bytes:
        body: bytes = s3.get_object(Bucket=settings.exports_bucket, Key=key)["Body"].read()
        return body

    return fetch


def _orchestrator(
    settings: AgentSettings,
    client: ResolverClient,
    fetch: Callable[[str], bytes],
    status: StatusPublisher,
    live_first: LiveFirst,
) -> Orchestrator:
    """This worker's orchestrator of rebuilds, as the settings configure it."""
    return Orchestrator(
        settings.product_dsn,
        client,
        fetch,
        worker=f"{socket.gethostname()}-{os.getpid()}",
        lease_ttl_seconds=settings.rebuild_lease_ttl_seconds,
        claim_seconds=settings.rebuild_claim_seconds,
        max_attempts=settings.rebuild_max_attempts,
        stale_export_seconds=settings.rebuild_stale_export_seconds,
        catchup_max_events_per_second=settings.rebuild_catchup_max_events_per_second,
        load_connections=settings.rebuild_load_connections,
        # Its own source: the orchestrator runs in another thread than the agent.
        epochs=EpochSource(settings.control_dsn),
        codec=codec_for(settings),
        on_change=status.row_changed,
        yield_to_live=live_first.yield_to_live,
    )


def register(
    app: Any, settings: AgentSettings, client: ResolverClient, live_first: LiveFirst = NO_LIVE_WORK
) -> None:
    topic = app.topic(
        settings.control_topic,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
    )
    epochs = EpochSource(settings.control_dsn)
    fetch = _export_fetcher(settings)
    status = StatusPublisher(settings.client_config(), settings.rebuild_status_topic)
    orchestrator = _orchestrator(settings, client, fetch, status, live_first)

    def current_epoch(tenant: str, catalog: str) -> int | None:
        return epochs.epochs([(tenant, catalog)], refresh=True).get((tenant, catalog))

    def record(value: bytes) -> None:
        try:
            command = control.decode(value)
        except CodecError as exc:
            log.error("control message skipped: %s %s", exc.code, exc)
            return
        answer = accept(settings.product_dsn, command, settings.agents_consumer, current_epoch)
        if answer.status in ("started", "cancelled") and answer.row is not None:
            status.row_changed(answer.row)
        elif answer.status in ("already_rebuilding", "refused") and command.kind == "rebuild":
            running = f": {answer.row.rebuild_id}" if answer.row is not None else ""
            status.publish(
                refusal(
                    command,
                    command.consumer or settings.agents_consumer,
                    answer.status.upper(),
                    f"{answer.message}{running}",
                )
            )
        log.info(
            "control %s %s: %s %s", command.kind, command.command_id, answer.status, answer.message
        )

    @app.agent(topic)  # type: ignore[untyped-decorator]
    async def commands(stream: Any) -> None:
        async for value in stream:
            await carry_out(record, value)

    def step_all() -> None:
        with live_first.background():
            step_each(
                settings.product_dsn,
                orchestrator,
                client,
                steps=settings.rebuild_steps_per_tick,
                keep=settings.rebuild_keep_generations,
            )

    @app.timer(interval=settings.agents_rebuild_interval_seconds)  # type: ignore[untyped-decorator]
    async def rebuild_steps() -> None:
        try:
            await asyncio.to_thread(step_all)
        except Exception:  # the list of rebuilds not read (PostgreSQL away): next tick
            log.exception("rebuild step failed; will try again")
