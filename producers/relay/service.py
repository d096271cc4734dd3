"""The relay process: composition root, signals, health and metrics."""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType

from db.control.pauses import PauseWatch
from producers.http.probes import serve
from producers.relay.publisher import Publisher
from producers.relay.relay import Relay
from producers.relay.settings import RelaySettings

log = logging.getLogger(__name__)


def build(settings: RelaySettings, pauses: PauseWatch | None = None) -> Relay:
    publisher = Publisher(
        settings.client_config(), settings.events_topic, settings.relay_delivery_timeout_seconds
    )
    return Relay(
        settings.resolver_dsn,
        publisher,
        batch_size=settings.relay_batch_size,
        poll_seconds=settings.relay_poll_seconds,
        gather_seconds=settings.relay_gather_seconds,
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
        ready_after = max(30.0, settings.relay_poll_seconds * 10)
        # A pass waits at most the delivery timeout per batch; a loop quiet for three
        # of those (or ten polls) is stuck.
        alive_after = max(
            60.0, settings.relay_delivery_timeout_seconds * 3, settings.relay_poll_seconds * 10
        )
        started = time.time()
        server = serve(
            settings.relay_http_host,
            settings.relay_http_port,
            # Alive from the start: the loop goes round, also while it reconnects.
            lambda: time.time() - max(relay.last_loop, started) < alive_after,
            # Not ready before its first pass, while the database is away (the loop is
            # reconnecting), or when no pass completed lately.
            lambda: relay.connected and time.time() - relay.last_pass < ready_after,
        )
    log.info("relay started, topic %s", settings.events_topic)
    try:
        relay.run(stop)
    finally:
        if server is not None:
            server.shutdown()
        pauses.stop()
        log.info("relay stopped")
