"""The evidence sweeper process (``gapless evidence-sweeper``): composition root,
loop, signals, health and metrics; and the one pass ``gapless evidence sweep`` runs."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

import psycopg
from prometheus_client import REGISTRY, Counter

from db.objects import s3_client
from producers.capture.evidence import EvidenceStore
from producers.capture.evidence_retention.metrics import EvidenceCollector
from producers.capture.evidence_retention.settings import EvidenceSweepSettings
from producers.capture.evidence_retention.sweep import SweepPolicy, SweepReport, sweep
from producers.capture.exceptions import EvidenceRejected, EvidenceUnavailable
from producers.http.probes import Heartbeat, serve

log = logging.getLogger(__name__)

_DELETED = Counter("gapless_evidence_deleted", "Deletions the evidence sweep carried out", ["kind"])


def policy(settings: EvidenceSweepSettings) -> SweepPolicy:
    return SweepPolicy(
        settings.evidence_retention_seconds,
        settings.evidence_sweep_page_size,
        settings.evidence_sweep_max_captures,
        settings.evidence_sweeper_id,
    )


def store(settings: EvidenceSweepSettings) -> EvidenceStore:
    return EvidenceStore(
        s3_client(settings),
        settings.evidence_bucket,
        settings.s3_max_attempts,
        settings.s3_max_concurrency,
    )


def sweep_once(settings: EvidenceSweepSettings, dry_run: bool = False) -> SweepReport:
    """One pass on a connection of its own."""
    with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
        return sweep(conn, store(settings), policy(settings), dry_run)


def run(
    settings: EvidenceSweepSettings,
    on_pass: Callable[[SweepReport], None],
    stop: threading.Event | None = None,
) -> None:
    """Sweep every ``evidence_sweep_interval_seconds`` until SIGTERM or SIGINT (or
    ``stop``). A failed pass (the database or the bucket away) is logged and tried
    again at the next interval; stopping mid-pass is safe, each step commits on its
    own and a pending object deletion is finished by the next pass."""
    stop = stop or threading.Event()
    heartbeat = Heartbeat(stale_after=max(60.0, settings.evidence_sweep_interval_seconds * 3))

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("evidence sweeper stopping on signal %d", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    server = None
    collector = None
    if settings.evidence_sweep_http_port:

        @contextmanager
        def connect() -> Iterator[psycopg.Connection]:
            with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
                yield conn

        collector = EvidenceCollector(connect)
        REGISTRY.register(collector)
        # Alive: the loop goes round; ready: a pass completed lately (not before the
        # first, not while the database or the bucket is away).
        server = serve(
            settings.evidence_sweep_http_host,
            settings.evidence_sweep_http_port,
            heartbeat.alive,
            heartbeat.passed_lately,
        )
    log.info("evidence sweeper started, window %ss", settings.evidence_retention_seconds)
    try:
        while not stop.is_set():
            heartbeat.looped()
            try:
                report = sweep_once(settings)
                _DELETED.labels("capture").inc(len(report.captures))
                _DELETED.labels("object").inc(len(report.objects))
                on_pass(report)
                heartbeat.passed()
            except (psycopg.Error, EvidenceUnavailable, EvidenceRejected) as exc:
                log.warning("evidence sweep failed, retrying next interval: %s", exc)
            stop.wait(settings.evidence_sweep_interval_seconds)
    finally:
        if server is not None:
            server.shutdown()
        if collector is not None:
            REGISTRY.unregister(collector)
    log.info("evidence sweeper stopped")
