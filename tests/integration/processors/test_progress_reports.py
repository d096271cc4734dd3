"""Progress reports against a resolver API that is down for a while, then back."""

from __future__ import annotations

from contextlib import ExitStack

import psycopg
from prometheus_client import REGISTRY
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from processors.reporter import ProgressReporter
from processors.resolver_client import ResolverClient, RetryPolicy
from producers.resolver.catalog_items import ItemChange
from schemas.codec import CODEC
from tests.fixtures.decisions import accept
from tests.fixtures.resolver_api import API_TOKEN, free_port, serving

CONSUMER = "product-applier"


def _applied_history(settings: DatabaseSettings, items: int) -> int:
    """Write ``items`` decisions and apply all their events; returns the last position."""
    pool = ConnectionPool(settings.resolver_dsn, min_size=1, max_size=1, open=True)
    epochs = EpochSource(settings.control_dsn)
    for i in range(items):
        with UnitOfWork(pool, epochs, CODEC) as uow:
            accept(uow, "t1", "c1", ItemChange("t1", "c1", f"i{i}", "lamp", f"lamp {i}"))
    pool.close()
    with psycopg.connect(settings.resolver_dsn) as conn:
        rows = conn.execute("SELECT position, key, value FROM outbox ORDER BY position").fetchall()
    applier = Applier(settings.product_dsn, epochs, CODEC, consumer=CONSUMER)
    applier.apply([RawMessage("events", 0, p, bytes(k), bytes(v)) for p, k, v in rows])
    applier.close()
    epochs.close()
    return len(rows)


def _held(settings: DatabaseSettings) -> list[tuple[str, int | None]]:
    with psycopg.connect(settings.resolver_owner_dsn) as conn:
        rows = conn.execute("SELECT consumer_id, reported_position FROM stream_consumer").fetchall()
    return [(str(c), p) for c, p in rows]


def test_reports_wait_out_a_resolver_that_is_down_and_lose_nothing(
    clean_db: DatabaseSettings,
) -> None:
    total = _applied_history(clean_db, 4)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    patient = RetryPolicy(max_attempts=8, base_seconds=0.05, cap_seconds=0.5)

    # Down for a whole pass: every attempt fails, the pass gives up, nothing is lost
    # (the resolver keeps retaining everything) and nothing is taken as reported.
    down = ResolverClient(url, API_TOKEN, timeout_s=1, retry=patient, sleep=lambda _: None)
    reporter = ProgressReporter(
        clean_db.product_dsn, down, CONSUMER, EpochSource(clean_db.control_dsn)
    )
    assert reporter.report_once() == 0
    assert reporter.reported == {} and _held(clean_db) == []
    down.close()

    # Down when the next pass starts, back while it backs off: the same call gets
    # through on a later attempt and the resolver holds the committed progress.
    with ExitStack() as api:
        attempts_failed: list[float] = []

        def back_off(pause: float) -> None:
            if not attempts_failed:
                api.enter_context(serving(clean_db, port))  # ready when it returns
            attempts_failed.append(pause)

        client = ResolverClient(url, API_TOKEN, timeout_s=1, retry=patient, sleep=back_off)
        reporter = ProgressReporter(
            clean_db.product_dsn, client, CONSUMER, EpochSource(clean_db.control_dsn)
        )
        assert reporter.report_once() == 1
        assert len(attempts_failed) >= 1
        assert reporter.reported == {("t1", "c1", 1): total}
        assert _held(clean_db) == [(CONSUMER, total)]
        assert reporter.report_once() == 0  # nothing moved since: nothing sent
        client.close()
    with psycopg.connect(clean_db.resolver_owner_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM outbox").fetchone() == (total,)


def _gauge(stream: tuple[str, str, int]) -> float | None:
    t, c, e = stream
    return REGISTRY.get_sample_value(
        "gapless_reported_progress", {"tenant": t, "catalog": c, "epoch": str(e)}
    )


def test_a_reporter_that_hands_over_forgets_what_it_reported(clean_db: DatabaseSettings) -> None:
    # Another agents worker took the recovery lease: this one's gauge must stop
    # showing the stream, and once it holds the lease again it reports afresh.
    total = _applied_history(clean_db, 2)
    stream = ("t1", "c1", 1)
    port = free_port()
    with serving(clean_db, port):
        client = ResolverClient(f"http://127.0.0.1:{port}", API_TOKEN, timeout_s=5)
        reporter = ProgressReporter(
            clean_db.product_dsn, client, CONSUMER, EpochSource(clean_db.control_dsn)
        )
        assert reporter.report_once() == 1
        assert _gauge(stream) == total
        reporter.forget()
        assert reporter.reported == {}
        assert _gauge(stream) is None
        assert reporter.report_once() == 1
        assert _gauge(stream) == total
        assert _held(clean_db) == [(CONSUMER, total)]
        client.close()
