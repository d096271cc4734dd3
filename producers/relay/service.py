"""The relay process: composition root, signals, health and metrics."""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType

from db.pauses import PauseWatch
from producers.relay.health import serve
from producers.relay.publisher import Publisher
from producers.relay.relay import Relay
from producers.relay.settings import RelaySettings

log = logging.getLogger(__name__)


def build(settings: RelaySettings, pauses: PauseWatch | None = None) -> Relay:
    publisher = Publisher(
        settings.kafka_bootstrap, settings.events_topic, settings.relay_delivery_timeout_seconds
    )
    return Relay(
        settings.resolver_dsn,
        publisher,
        batch_size=settings.relay_batch_size,
        poll_seconds=settings.relay_poll_seconds,
        pauses=pauses,
    )


def run(settings: RelaySettings) -> None:
    """Run until SIGTERM or SIGINT, then finish the current batch and exit.

    Stopping mid-batch is safe anyway (rows above the published position are sent
    again), but a clean stop avoids the duplicates.
    """
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("relay stopping on signal %d", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    pauses = settings.pause_watch("relay").start()
    relay = build(settings, pauses)
    server = None
    if settings.relay_http_port:
        stale_after = max(30.0, settings.relay_poll_seconds * 10)
        # Not ready while the database is away (the loop is reconnecting) or when no
        # pass completed lately.
        server = serve(
            settings.relay_http_port,
            lambda: relay.connected and time.time() - relay.last_pass < stale_after,
        )
    log.info("relay started, topic %s", settings.events_topic)
    try:
        relay.run(stop)
    finally:
        if server is not None:
            server.shutdown()
        pauses.stop()
        log.info("relay stopped")
