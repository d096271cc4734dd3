"""Lag in seconds, read from the resolver's own tables: how long the oldest
unpublished row has waited, how old the oldest event a consumer has not applied is,
and how long its progress has not moved while events wait. The rows' commit times
are moved back (``age``) so the expected ages are minutes, far above any clock
noise of the test."""

from __future__ import annotations

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from db.settings import DatabaseSettings
from producers.retention import consumers
from producers.retention.metrics import RetentionCollector
from producers.retention.report import StreamRetention, stream_report
from schemas.ids import StreamId
from tests.integration.producers.retention.streams import age, publish, write_events

SLACK = 30.0
"""Seconds the test itself may take between aging the rows and reading the ages."""


def conn_of(settings: DatabaseSettings) -> psycopg.Connection:
    return psycopg.connect(settings.resolver_dsn, autocommit=True)


def state_of(settings: DatabaseSettings, stream: StreamId) -> StreamRetention:
    with conn_of(settings) as conn:
        (state,) = stream_report(conn, stream)
    return state


def close_to(value: float | None, expected: float) -> bool:
    return value is not None and expected <= value < expected + SLACK


def set_progressed(settings: DatabaseSettings, stream: StreamId, seconds_ago: float) -> None:
    """Make the consumer's last progress look ``seconds_ago`` old (as its owner)."""
    with psycopg.connect(settings.resolver_owner_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE stream_consumer SET progressed_at = now() - make_interval(secs => %s)"
            " WHERE tenant_id = %s AND catalog_id = %s AND history_epoch = %s",
            (seconds_ago, *stream),
        )


def test_the_oldest_unpublished_row_gives_the_relay_its_age(clean_db: DatabaseSettings) -> None:
    stream = write_events(clean_db, "t1", "c1", 5)
    age(clean_db, stream, 5, 300)
    age(clean_db, stream, 1, 900)
    assert close_to(state_of(clean_db, stream).unpublished_age_s, 900)

    publish(clean_db, stream, 1)
    assert close_to(state_of(clean_db, stream).unpublished_age_s, 300)

    publish(clean_db, stream, 5)
    assert state_of(clean_db, stream).unpublished_age_s is None


def test_a_fenced_stream_has_no_unpublished_age(clean_db: DatabaseSettings) -> None:
    """Its rows above the published position stay unpublished on purpose (history)."""
    stream = write_events(clean_db, "t1", "c1", 3)
    age(clean_db, stream, 3, 600)
    assert close_to(state_of(clean_db, stream).unpublished_age_s, 600)
    with psycopg.connect(clean_db.resolver_owner_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE stream_cursor SET fenced_at = now(), fenced_for_epoch = history_epoch + 1"
            " WHERE tenant_id = %s AND catalog_id = %s AND history_epoch = %s",
            tuple(stream),
        )
    assert state_of(clean_db, stream).unpublished_age_s is None


def test_a_consumer_s_age_is_its_oldest_unapplied_event_and_its_stall_since_progress(
    clean_db: DatabaseSettings,
) -> None:
    stream = write_events(clean_db, "t1", "c1", 6)
    age(clean_db, stream, 6, 120)
    age(clean_db, stream, 3, 1200)
    publish(clean_db, stream, 6)
    with conn_of(clean_db) as conn:
        consumers.register(conn, stream, "projection")
    # Registered, never reported: everything waits, the oldest event 20 min old; its
    # progress has not moved since it registered, just now (the later of the two).
    (lag,) = state_of(clean_db, stream).consumers
    assert close_to(lag.waiting_age_s, 1200)
    assert close_to(lag.unchanged_s, 0)

    with conn_of(clean_db) as conn:
        consumers.report(conn, stream, "projection", 3)
    (lag,) = state_of(clean_db, stream).consumers
    assert lag.lag == 3
    assert close_to(lag.waiting_age_s, 120)  # position 4 is the oldest unapplied
    assert close_to(lag.unchanged_s, 0)  # it just moved

    # Progress unchanged for 10 minutes, but event 4 only waits for 2 of them: the
    # stall counts from the later of the two.
    set_progressed(clean_db, stream, 600)
    assert close_to(state_of(clean_db, stream).consumers[0].unchanged_s, 120)
    set_progressed(clean_db, stream, 60)
    assert close_to(state_of(clean_db, stream).consumers[0].unchanged_s, 60)

    # A report that repeats the position is not progress.
    with conn_of(clean_db) as conn:
        consumers.report(conn, stream, "projection", 3)
    assert close_to(state_of(clean_db, stream).consumers[0].unchanged_s, 60)

    with conn_of(clean_db) as conn:
        consumers.report(conn, stream, "projection", 6)
    (lag,) = state_of(clean_db, stream).consumers
    assert (lag.lag, lag.waiting_age_s, lag.unchanged_s) == (0, None, None)


def test_the_ages_are_exported_as_gauges_and_fall_to_zero(clean_db: DatabaseSettings) -> None:
    stream = write_events(clean_db, "t1", "c1", 4)
    age(clean_db, stream, 4, 300)
    publish(clean_db, stream, 2)
    with conn_of(clean_db) as conn:
        consumers.register(conn, stream, "projection")
        consumers.report(conn, stream, "projection", 1)
    set_progressed(clean_db, stream, 400)
    registry = CollectorRegistry()
    registry.register(RetentionCollector(lambda: conn_of(clean_db)))
    labels = {"tenant": "t1", "catalog": "c1", "epoch": str(stream.history_epoch)}
    consumer = {**labels, "consumer": "projection"}

    def sample(name: str, of: dict[str, str]) -> float | None:
        return registry.get_sample_value(name, of)

    assert close_to(sample("gapless_retention_unpublished_age_seconds", labels), 300)
    assert close_to(sample("gapless_retention_consumer_lag_seconds", consumer), 300)
    assert close_to(sample("gapless_retention_consumer_stalled_seconds", consumer), 300)

    publish(clean_db, stream, 4)
    with conn_of(clean_db) as conn:
        consumers.report(conn, stream, "projection", 4)
    for name, of in (
        ("gapless_retention_unpublished_age_seconds", labels),
        ("gapless_retention_consumer_lag_seconds", consumer),
        ("gapless_retention_consumer_stalled_seconds", consumer),
    ):
        assert sample(name, of) == pytest.approx(0.0), name
