"""The applier agent: batches from ``catalog.events.v1`` into the product database."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg
from prometheus_client import Counter

from db.epochs import EpochSource
from db.pauses import PauseWatch
from processors.applier.batch import Applier, BatchResult
from processors.applier.messages import RawMessage
from processors.settings import AgentSettings
from schemas.backoff import Reconnect
from schemas.codec import CODEC

log = logging.getLogger(__name__)

EVENTS = Counter("gapless_applier_events_total", "Events by outcome", ["outcome"])


def register(app: Any, settings: AgentSettings, pauses: PauseWatch | None = None) -> None:
    topic = app.topic(
        settings.events_topic,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
    )
    applier = Applier(
        settings.product_dsn,
        EpochSource(settings.control_dsn),
        CODEC,
        consumer=settings.agents_consumer,
        pauses=pauses,
    )

    @app.on_rebalance_complete.connect  # type: ignore[untyped-decorator]
    async def resume_from_database(sender: Any = None, **_: Any) -> None:
        """Hand Kafka the resume offsets kept in the product database.

        Faust seeks to Kafka's committed offsets right after this signal. Those can be
        ahead of what was applied: during a rebalance Faust acknowledges messages it
        drops as stale, and a crash can leave acknowledgements of work that rolled
        back. Committing the database's offsets first makes the seek land where the
        product database says work stops; anything re-read is absorbed by the inbox.
        While the product database is away this waits for it (jittered backoff):
        seeking without its offsets could skip work that rolled back.
        """
        reconnect = Reconnect(cap_seconds=settings.agents_retry_max_seconds)
        while True:
            try:
                stored = await asyncio.to_thread(applier.resume_offsets, settings.events_topic)
                break
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                pause = reconnect.failed()
                log.warning("resume offsets not read, retrying in %.1fs: %s", pause, exc)
                await asyncio.sleep(pause)
        assigned = [tp for tp in app.consumer.assignment() if tp.topic == settings.events_topic]
        rewind = {tp: stored[tp.partition] for tp in assigned if tp.partition in stored}
        if rewind:
            await app.consumer._commit(rewind)
            log.info("resuming from product-database offsets %s", sorted(rewind.items()))

    @app.agent(topic, name="apply-events")  # type: ignore[untyped-decorator]
    async def apply_events(stream: Any) -> None:
        """Apply each batch, and acknowledge it only after its transaction committed.

        ``noack_take`` leaves acknowledgement to us. If the process dies between the
        commit and the acks, the batch is delivered again and the inbox absorbs it.
        """
        async for events in stream.noack_take(
            settings.agents_batch_size, within=settings.agents_batch_within_seconds
        ):
            messages = [
                RawMessage(
                    e.message.topic,
                    e.message.partition,
                    e.message.offset,
                    e.message.key,
                    e.message.value,
                )
                for e in events
            ]
            result = await apply_until_committed(applier, messages, settings)
            count(result)
            for event in events:
                await stream.ack(event)


async def apply_until_committed(
    applier: Applier, messages: list[RawMessage], settings: AgentSettings
) -> BatchResult:
    """Retry transient failures (a lost connection) with jittered backoff
    (``schemas.backoff``: doubling from 0.1 s, at most ``agents_retry_max_seconds``).

    Never returns without a commit: the caller acknowledges on return. Cancellation
    (shutdown) propagates without acknowledging anything.
    """
    reconnect = Reconnect(base_seconds=0.1, cap_seconds=settings.agents_retry_max_seconds)
    while True:
        try:
            return await asyncio.to_thread(applier.apply, messages)
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            pause = reconnect.failed()
            log.warning("batch not applied, retrying in %.1fs: %s", pause, exc)
        except Exception:
            # A bug, not bad data (bad data is quarantined inside apply). Keep the
            # messages unacknowledged and retry rather than crash the worker.
            pause = reconnect.failed()
            log.exception("unexpected error applying a batch; retrying in %.1fs", pause)
        await asyncio.sleep(pause)


def count(result: BatchResult) -> None:
    EVENTS.labels("applied").inc(result.applied)
    EVENTS.labels("duplicate").inc(result.duplicates)
    EVENTS.labels("parked").inc(result.parked)
    EVENTS.labels("released").inc(result.released)
    EVENTS.labels("ignored").inc(result.ignored)
    EVENTS.labels("quarantined").inc(result.quarantined)
    EVENTS.labels("deferred_paused").inc(result.deferred)
