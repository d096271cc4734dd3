"""The relay counts each row it publishes by the time from the writer's commit to
Kafka's confirmation (``gapless_relay_commit_to_published_seconds``)."""

from __future__ import annotations

import psycopg
from prometheus_client import REGISTRY

from db.settings import DatabaseSettings
from producers.relay.publisher import Publisher
from producers.relay.relay import Relay
from schemas.settings import KafkaSettings
from tests.integration.producers.relay.test_relay import _outbox_count, _write

NAME = "gapless_relay_commit_to_published_seconds"


def sample(suffix: str, le: str | None = None) -> float:
    return REGISTRY.get_sample_value(NAME + suffix, {"le": le} if le else {}) or 0.0


def test_rows_committed_minutes_ago_are_counted_minutes_late(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, topic: str
) -> None:
    _write(clean_db, 12)
    total = _outbox_count(clean_db)
    with psycopg.connect(clean_db.resolver_owner_dsn, autocommit=True) as conn:
        conn.execute("UPDATE outbox SET committed_at = now() - interval '2 minutes'")
    before = {le: sample("_bucket", le) for le in ("60.0", "300.0")}
    count, seconds = sample("_count"), sample("_sum")

    relay = Relay(clean_db.resolver_dsn, Publisher(kafka_settings.kafka_bootstrap, topic))
    while relay.run_once():
        pass

    assert sample("_count") - count == total
    assert sample("_bucket", "60.0") - before["60.0"] == 0
    assert sample("_bucket", "300.0") - before["300.0"] == total
    assert 120 * total <= sample("_sum") - seconds < 300 * total
