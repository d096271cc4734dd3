"""The relay as a deployed process: health, metrics, and a clean stop on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import psycopg
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from infra.processes import free_port
from producers.resolver.catalog_items import ItemChange
from schemas.codec import CODEC
from tests.fixtures.decisions import accept


def _published(settings: DatabaseSettings) -> int:
    with psycopg.connect(settings.resolver_dsn) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(published_position), 0) FROM stream_publication"
        ).fetchone()
    return int(row[0]) if row else 0


def test_relay_serves_health_and_metrics_and_stops_cleanly_on_sigterm(
    clean_db: DatabaseSettings, topic: str
) -> None:
    port = free_port()
    env = dict(os.environ, GAPLESS_EVENTS_TOPIC=topic, GAPLESS_RELAY_HTTP_PORT=str(port))
    relay = subprocess.Popen(
        [sys.executable, "-m", "infra.cli", "relay"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert relay.poll() is None, relay.stdout.read() if relay.stdout else ""
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "relay health endpoint never answered"
                time.sleep(0.2)
        assert health.status_code == 200

        pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=1, open=True)
        epochs = EpochSource(clean_db.control_dsn)
        with UnitOfWork(pool, epochs, CODEC) as uow:  # five events: a decision, four items
            accept(
                uow, "t1", "c1", *(ItemChange("t1", "c1", f"i{i}", "lamp", "l") for i in range(4))
            )
        pool.close()
        epochs.close()
        # NOTIFY wakes the relay; it publishes without waiting for its poll.
        deadline = time.monotonic() + 15
        while _published(clean_db) < 5:
            assert time.monotonic() < deadline, "relay did not publish"
            time.sleep(0.1)
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
        assert "gapless_relay_published_total 5.0" in metrics

        relay.send_signal(signal.SIGTERM)
        assert relay.wait(timeout=20) == 0
    finally:
        if relay.poll() is None:
            relay.kill()
            relay.wait()
    output = relay.stdout.read().decode() if relay.stdout else ""
    assert "relay stopped" in output


def test_relay_is_alive_from_the_start_and_ready_only_after_a_pass(
    clean_db: DatabaseSettings, topic: str
) -> None:
    """Its database away (a port nothing listens on), the relay keeps reconnecting:
    alive on /healthz all along, not ready on /readyz; with its database it turns
    ready after its first pass."""
    port, nowhere = free_port(), free_port()
    away = dict(
        os.environ,
        GAPLESS_EVENTS_TOPIC=topic,
        GAPLESS_RELAY_HTTP_PORT=str(port),
        GAPLESS_RESOLVER_DSN=f"postgresql://nobody@127.0.0.1:{nowhere}/resolver",
    )
    for env, ready in ((away, 503), (dict(away, GAPLESS_RESOLVER_DSN=clean_db.resolver_dsn), 200)):
        relay = subprocess.Popen(
            [sys.executable, "-m", "infra.cli", "relay"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                assert relay.poll() is None, relay.stdout.read() if relay.stdout else ""
                try:
                    alive = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                    readiness = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1)
                except httpx.HTTPError:
                    readiness = None
                if readiness is not None:
                    assert alive.status_code == 200
                    if readiness.status_code == ready:
                        break
                assert time.monotonic() < deadline, f"/readyz never answered {ready}"
                time.sleep(0.2)
            if ready == 503:
                # Still not ready after a failed reconnect, and still alive.
                _wait_logged(relay, "relay lost its database")
                assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 503
                assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
            relay.send_signal(signal.SIGTERM)
            assert relay.wait(timeout=20) == 0
        finally:
            if relay.poll() is None:
                relay.kill()
                relay.wait()


def _wait_logged(process: subprocess.Popen[bytes], text: str) -> None:
    assert process.stdout is not None
    deadline = time.monotonic() + 30
    seen = b""
    while text.encode() not in seen:
        assert time.monotonic() < deadline, f"never logged {text!r}:\n{seen.decode()[-2000:]}"
        line = process.stdout.readline()
        assert line, f"exited before logging {text!r}:\n{seen.decode()[-2000:]}"
        seen += line
