"""The Faust application of the product agents (composition root)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from typing import Any

import faust

from processors.broker import broker_credentials
from processors.settings import AgentSettings


def create_app(settings: AgentSettings) -> Any:
    """Build the Faust app and register the agents.

    Kafka offsets are only a delivery hint here: the agents keep durable progress in
    the product database, and commit offsets only for messages already committed
    there. Faust's own tables and stores are not used.
    """
    from processors.agents import events as events_agent
    from processors.agents import health, housekeeping, rebuilds, recovery
    from processors.live_first import LiveFirst

    # Faust insists on a data directory (``<app id>-data`` in the working directory by
    # default) even with no tables in use: a private temporary one keeps the working
    # directory clean and works on a read-only container filesystem.
    datadir = tempfile.mkdtemp(prefix=f"{settings.agents_app_id}-")
    atexit.register(shutil.rmtree, datadir, ignore_errors=True)
    app = faust.App(
        settings.agents_app_id,
        datadir=datadir,
        broker=f"kafka://{settings.kafka_bootstrap}",
        broker_credentials=broker_credentials(settings),
        store="memory://",
        autodiscover=False,
        topic_replication_factor=settings.kafka_replication_factor,
        topic_partitions=settings.events_partitions,
        consumer_auto_offset_reset="earliest",
        web_port=settings.agents_web_port,
        web_host=settings.agents_web_host,
        web_in_thread=False,
        broker_commit_interval=1.0,
        # A worker that dies is noticed after this long and its partitions move on;
        # Faust's 60 s default would stall those streams for a minute after a crash.
        broker_session_timeout=settings.agents_session_timeout_seconds,
        broker_heartbeat_interval=settings.agents_session_timeout_seconds / 4,
    )
    # The live consumer honours catalog pauses (a rebuild does not: it ends a restore).
    pauses = settings.pause_watch("agents").start()
    atexit.register(pauses.stop)  # a clean stop is not waited for by the next pause
    live_first = LiveFirst()
    consuming = events_agent.register(app, settings, pauses, live_first)
    client = recovery.resolver_client(settings)
    recovery.register(app, settings, client, pauses)
    rebuilds.register(app, settings, client, live_first)
    housekeeping.register(app, settings)
    health.register(app, settings.product_dsn, consuming)
    return app
