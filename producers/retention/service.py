"""The pruner process: composition root, loop and signals."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType

import psycopg

from producers.retention.pruner import RetentionPolicy, StreamPruned, prune_all
from producers.retention.settings import RetentionSettings
from schemas.backoff import Reconnect

log = logging.getLogger(__name__)


def policy(settings: RetentionSettings) -> RetentionPolicy:
    return RetentionPolicy(settings.retention_age_seconds, settings.prune_batch_size)


def prune_once(settings: RetentionSettings) -> list[StreamPruned]:
    """One pass over every stream, on a connection of its own."""
    with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
        return prune_all(conn, policy(settings))


def run(
    settings: RetentionSettings,
    on_pass: Callable[[list[StreamPruned]], None],
    stop: threading.Event | None = None,
) -> None:
    """Prune every ``prune_interval_seconds`` until SIGTERM or SIGINT (or ``stop``).

    A pass that fails (the database down or restarting, say) is logged and tried
    again after a bounded, jittered pause (``schemas.backoff.Reconnect``, never longer
    than the interval); each pass connects afresh. Stopping mid-pass is safe, each
    batch commits on its own.
    """
    stop = stop or threading.Event()
    reconnect = Reconnect(cap_seconds=min(5.0, settings.prune_interval_seconds))

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("pruner stopping on signal %d", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    log.info("pruner started, retention age %ss", settings.retention_age_seconds)
    while not stop.is_set():
        try:
            results = prune_once(settings)
        except psycopg.Error as exc:
            pause = reconnect.failed()
            log.warning("prune pass failed on the database (%s); next try in %.1fs", exc, pause)
            stop.wait(pause)
            continue
        if not reconnect.connected:
            log.info("pruner reconnected to its database")
        reconnect.succeeded()
        on_pass(results)
        stop.wait(settings.prune_interval_seconds)
    log.info("pruner stopped")
