"""The pruner process: composition root, loop and signals."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType

import psycopg

from db.resolver import retention as sql
from db.resolver import sweeps
from producers.http.probes import Heartbeat, serve
from producers.retention.consumers import declare_standing
from producers.retention.pruner import RetentionPolicy, StreamPruned, prune_all
from producers.retention.settings import RetentionSettings
from schemas.backoff import Reconnect

log = logging.getLogger(__name__)


def policy(settings: RetentionSettings) -> RetentionPolicy:
    return RetentionPolicy(
        settings.retention_age_seconds,
        settings.prune_batch_size,
        settings.fenced_retention_seconds,
    )


AfterPass = Callable[[psycopg.Connection], object]


def prune_once(settings: RetentionSettings, after: AfterPass | None = None) -> list[StreamPruned]:
    """One pass over every stream, on a connection of its own; then the rebuild
    leases ended longer than ``GAPLESS_LEASE_RETENTION_SECONDS`` ago that no export
    row names (``db.resolver.sweeps``; export rows go in ``after``, so a lease whose export
    row goes this pass goes the next); then ``after`` on the same connection (the
    composition root passes export retention)."""
    with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
        results = prune_all(conn, policy(settings))
        sweeps.ended_leases(conn, settings.lease_retention_seconds, settings.prune_batch_size)
        if after is not None:
            after(conn)
        return results


def declare_configured(settings: RetentionSettings) -> None:
    """Declare every consumer of ``GAPLESS_RETENTION_CONSUMERS`` standing (idempotent),
    and warn about standing consumers the setting no longer names: they keep holding
    every stream until an operator retires them."""
    configured = settings.standing_consumers()
    with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
        for consumer_id in configured:
            if declare_standing(conn, consumer_id, "GAPLESS_RETENTION_CONSUMERS"):
                log.info("standing consumer %s declared", consumer_id)
        for row in sql.standing_consumers(conn):
            if row.consumer_id not in configured:
                log.warning(
                    "standing consumer %s is not in GAPLESS_RETENTION_CONSUMERS; it holds"
                    " every stream until retired (gapless consumers retire %s)",
                    row.consumer_id,
                    row.consumer_id,
                )


def run(
    settings: RetentionSettings,
    on_pass: Callable[[list[StreamPruned]], None],
    stop: threading.Event | None = None,
    after: AfterPass | None = None,
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
    heartbeat = Heartbeat(stale_after=max(60.0, settings.prune_interval_seconds * 3))
    server = None
    if settings.prune_http_port:
        # Alive: the loop goes round (also while it waits for the database); ready: a
        # pass completed lately (not before the first one).
        server = serve(
            settings.prune_http_host,
            settings.prune_http_port,
            heartbeat.alive,
            heartbeat.passed_lately,
        )
    log.info("pruner started, retention age %ss", settings.retention_age_seconds)
    try:
        _loop(settings, on_pass, stop, after, reconnect, heartbeat)
    finally:
        if server is not None:
            server.shutdown()
    log.info("pruner stopped")


def _loop(
    settings: RetentionSettings,
    on_pass: Callable[[list[StreamPruned]], None],
    stop: threading.Event,
    after: AfterPass | None,
    reconnect: Reconnect,
    heartbeat: Heartbeat,
) -> None:
    declared = False
    while not stop.is_set():
        heartbeat.looped()
        try:
            # Before the first pass: a consumer configured to stand must hold every
            # stream before anything is pruned.
            if not declared:
                declare_configured(settings)
                declared = True
            results = prune_once(settings, after)
        except psycopg.Error as exc:
            pause = reconnect.failed()
            log.warning("prune pass failed on the database (%s); next try in %.1fs", exc, pause)
            stop.wait(pause)
            continue
        if not reconnect.connected:
            log.info("pruner reconnected to its database")
        reconnect.succeeded()
        heartbeat.passed()
        on_pass(results)
        stop.wait(settings.prune_interval_seconds)
