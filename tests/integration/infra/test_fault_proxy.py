"""The fault proxy against the real services: each fault does to a client's
connections what ``infra.chaos.proxy`` says, and healing gives them back."""

from __future__ import annotations

import threading

import boto3
import psycopg
import pytest
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from confluent_kafka.admin import AdminClient

from db.settings import DatabaseSettings
from infra.chaos.proxy import Down, Drop, Routes, Slow, Stall, through
from infra.local import s3
from infra.local.layout import current_layout


def _connect(dsn: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(dsn, connect_timeout=2, autocommit=True)


def test_drop_resets_what_carries_data_and_heal_lets_new_connections_through(
    db_settings: DatabaseSettings, fault_routes: Routes
) -> None:
    dsn = through(db_settings.product_dsn, fault_routes.pg)
    with _connect(dsn) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        fault = Drop(fault_routes.pg)
        assert (fault.kind, fault.target) == ("drop", "pg")
        fault.apply()
        fault.apply()  # idempotent
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
        with pytest.raises(psycopg.OperationalError):
            _connect(dsn)
        fault.heal()
        fault.heal()  # idempotent
    with _connect(dsn) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_stall_is_silence_until_healed_and_then_the_stalled_connection_closes(
    db_settings: DatabaseSettings, fault_routes: Routes
) -> None:
    dsn = through(db_settings.product_dsn, fault_routes.pg)
    outcome: list[BaseException | object] = []
    with _connect(dsn) as conn:
        fault = Stall(fault_routes.pg)
        fault.apply()

        def query() -> None:
            try:
                outcome.append(conn.execute("SELECT 1").fetchone())
            except BaseException as exc:
                outcome.append(exc)

        stalled = threading.Thread(target=query, daemon=True)
        stalled.start()
        # A new connection meets the same silence: only its own timeout ends it.
        with pytest.raises(psycopg.OperationalError, match="timeout"):
            _connect(dsn)
        assert stalled.is_alive() and outcome == []  # no answer, no error
        fault.heal()
        stalled.join(timeout=30)
        assert not stalled.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], psycopg.OperationalError)
    with _connect(dsn) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_down_refuses_connections_and_slow_delays_answers(
    db_settings: DatabaseSettings, fault_routes: Routes
) -> None:
    dsn = through(db_settings.product_dsn, fault_routes.pg)
    down = Down(fault_routes.pg)
    down.apply()
    assert not fault_routes.pg.enabled()
    with pytest.raises(psycopg.OperationalError, match="refused"):
        _connect(dsn)
    down.heal()
    slow = Slow(fault_routes.pg, latency_ms=300, jitter_ms=0)
    with _connect(dsn) as conn:
        slow.apply()
        assert fault_routes.pg.toxics() == ["slow"]
        assert conn.execute("SELECT 1").fetchone() == (1,)
        slow.heal()
    assert fault_routes.pg.toxics() == []


def test_kafka_clients_reach_the_broker_only_through_the_proxy(fault_routes: Routes) -> None:
    broker = fault_routes.kafka
    assert broker is not None
    admin = AdminClient({"bootstrap.servers": broker.listen, "log_level": 0})
    brokers = admin.list_topics(timeout=10).brokers
    # The broker advertises the proxy on this listener, so no client goes around it.
    assert [f"{b.host}:{b.port}" for b in brokers.values()] == [broker.listen]
    env = fault_routes.environment({"GAPLESS_PRODUCT_DSN": "postgresql://u@127.0.0.1:1/product"})
    assert env["GAPLESS_KAFKA_BOOTSTRAP"] == broker.listen
    assert env["GAPLESS_PRODUCT_DSN"] == f"postgresql://u@{fault_routes.pg.listen}/product"


def test_the_object_store_through_the_proxy_and_down(fault_routes: Routes) -> None:
    creds = s3.credentials(current_layout())
    client = boto3.client(
        "s3",
        endpoint_url=f"http://{fault_routes.s3.listen}",
        aws_access_key_id=creds.access_key,
        aws_secret_access_key=creds.secret_key,
        region_name=s3.REGION,
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1},
            connect_timeout=2,
            read_timeout=2,
        ),
    )
    names = {b["Name"] for b in client.list_buckets()["Buckets"]}
    assert s3.EVIDENCE_BUCKET in names
    down = Down(fault_routes.s3)
    down.apply()
    with pytest.raises((BotoCoreError, ClientError)):
        client.list_buckets()
    down.heal()
    assert s3.EVIDENCE_BUCKET in {b["Name"] for b in client.list_buckets()["Buckets"]}
