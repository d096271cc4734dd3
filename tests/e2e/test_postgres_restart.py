"""Every long-running process recovers by itself from a PostgreSQL crash and restart.

The resolver API, the relay, the product agents, the capture worker, the job sweeper
and the pruner run as separate processes while writers put decisions through; then
PostgreSQL stops with an immediate shutdown (every connection cut, crash recovery at
the next start) and, once the processes report not ready, starts again. Every process
must come back ready without being restarted, and the load must arrive complete:
every stream's durable progress at its committed cursor, each event applied or
ignored once, the projection equal to the resolver's items, everything pruned.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.settings import DatabaseSettings
from infra.local import postgres
from infra.local.layout import current_layout
from infra.processes import Deployed, free_port
from tests.fixtures.waits import wait_for
from tests.fixtures.writers import accept_lamps

TENANTS = ("pgr-0", "pgr-1", "pgr-2")
TRANSACTIONS = 150  # each a decision and two items: 450 events
SWEEPER_APP = "gapless-test-sweeper"


@pytest.fixture()
def postgres_back_up() -> Iterator[None]:
    """Whatever happens in the test, later tests find PostgreSQL running."""
    yield
    layout = current_layout()
    if postgres.status(layout).detail == "not running":
        postgres.start(layout, print)


def _processes(topic: str, logs: Path) -> list[Deployed]:
    api_port, relay_port, agents_port, worker_port = (free_port() for _ in range(4))
    api_url = f"http://127.0.0.1:{api_port}"
    env = dict(
        os.environ,
        GAPLESS_EVENTS_TOPIC=topic,
        GAPLESS_RESOLVER_API_PORT=str(api_port),
        GAPLESS_RESOLVER_URL=api_url,
    )

    def process(name: str, args: list[str], health: str | None, **extra: str) -> Deployed:
        return Deployed(name, args, {**env, **extra}, logs / f"{name}.log", health)

    return [
        process("resolver-api", ["resolver-api"], f"{api_url}/readyz"),
        process(
            "relay",
            ["relay"],
            f"http://127.0.0.1:{relay_port}/readyz",
            GAPLESS_RELAY_HTTP_PORT=str(relay_port),
        ),
        process(
            "agents",
            ["agents"],
            f"http://127.0.0.1:{agents_port}/readyz",
            GAPLESS_AGENTS_APP_ID=f"pg-restart-{uuid.uuid4().hex[:8]}",
            GAPLESS_AGENTS_WEB_PORT=str(agents_port),
            GAPLESS_AGENTS_REPORT_INTERVAL_SECONDS="1",
        ),
        process(
            "resolver-worker",
            ["resolver-worker"],
            f"http://127.0.0.1:{worker_port}/readyz",
            GAPLESS_WORKER_HTTP_PORT=str(worker_port),
        ),
        # The sweeper names its connections, so the test can see it reconnect.
        process(
            "sweep-jobs",
            ["sweep-jobs"],
            None,
            GAPLESS_SWEEP_INTERVAL_SECONDS="1",
            PGAPPNAME=SWEEPER_APP,
        ),
        process(
            "prune",
            ["prune"],
            None,
            GAPLESS_RETENTION_AGE_SECONDS="0",
            GAPLESS_PRUNE_INTERVAL_SECONDS="1",
        ),
    ]


class Writers:
    """Decisions through the one write path, in a thread, across the restart: a
    transaction that fails on the lost database is tried again (bounded), like a
    client would; what counts at the end is what the resolver committed."""

    def __init__(self, settings: DatabaseSettings) -> None:
        self._settings = settings
        self.done = 0
        self.failures = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the writers did not finish"
        assert self.error is None, repr(self.error)

    def _run(self) -> None:
        pool = ConnectionPool(
            self._settings.resolver_dsn,
            min_size=1,
            max_size=1,
            check=ConnectionPool.check_connection,
            open=True,
        )
        epochs = EpochSource(self._settings.control_dsn)
        try:
            for n in range(TRANSACTIONS):
                tenant = TENANTS[n % len(TENANTS)]
                deadline = time.monotonic() + 90
                while True:
                    try:
                        accept_lamps(pool, epochs, tenant, n)
                        break
                    except psycopg.Error:
                        self.failures += 1
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.2)
                self.done = n + 1
                time.sleep(0.02)
        except BaseException as exc:  # reported by join()
            self.error = exc
        finally:
            pool.close()
            epochs.close()


def _one(dsn: str, query: str, *params: object) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query, params).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def _cursors(settings: DatabaseSettings) -> dict[str, int]:
    with psycopg.connect(settings.resolver_dsn) as conn:
        rows = conn.execute(
            "SELECT tenant_id, position FROM stream_cursor WHERE tenant_id LIKE 'pgr-%'"
        ).fetchall()
    return {t: int(p) for t, p in rows}


def _progress(settings: DatabaseSettings) -> dict[str, int]:
    with psycopg.connect(settings.product_dsn) as conn:
        rows = conn.execute(
            "SELECT tenant_id, position FROM stream_progress WHERE tenant_id LIKE 'pgr-%'"
        ).fetchall()
    return {t: int(p) for t, p in rows}


@pytest.mark.slow
def test_every_process_recovers_from_a_postgres_crash_under_load(
    clean_db: DatabaseSettings, topic: str, postgres_back_up: None, tmp_path: Path
) -> None:
    layout = current_layout()
    processes = _processes(topic, tmp_path)
    served = [p for p in processes if p.health_url is not None]
    writers = Writers(clean_db)
    try:
        for p in processes:
            p.start()
        wait_for(lambda: all(p.health() == 200 for p in served), "every process ready", 90)
        writers.start()
        # Under load: some events applied end to end before the crash.
        wait_for(lambda: sum(_progress(clean_db).values()) >= 30, "the first events", 60)

        postgres.crash(layout, print)
        # Everything cut off from the database says so, and nothing exits.
        wait_for(
            lambda: all(p.health() not in (200, None) for p in served),
            "every process to report not ready",
            60,
        )
        assert all(p.alive() for p in processes), "\n".join(p.tail() for p in processes)
        postgres.start(layout, print)

        writers.join(timeout=240)
        assert writers.failures > 0  # the writers did meet the restart
        wait_for(lambda: all(p.health() == 200 for p in served), "every process ready again", 90)
        cursors = _cursors(clean_db)
        assert set(cursors) == set(TENANTS)
        wait_for(lambda: _progress(clean_db) == cursors, "progress at every cursor", 120)
        # The sweeper holds a connection again; the pruner went on pruning (everything
        # was applied and reported, and the retention age is 0).
        wait_for(
            lambda: (
                _one(
                    clean_db.resolver_owner_dsn,
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                    SWEEPER_APP,
                )
                > 0
            ),
            "the sweeper to reconnect",
            60,
        )
        wait_for(
            lambda: (
                _one(
                    clean_db.resolver_dsn,
                    "SELECT count(*) FROM outbox WHERE tenant_id LIKE 'pgr-%%'",
                )
                == 0
            ),
            "the pruner to prune every applied event",
            60,
        )
        assert all(p.alive() for p in processes), "\n".join(p.tail() for p in processes)
    finally:
        for p in reversed(processes):
            p.stop()
    logs = "\n".join(p.tail() for p in processes)
    for p in processes:  # uvicorn ends by re-raising the SIGTERM it handled
        assert p.popen is not None and p.popen.returncode in (0, -signal.SIGTERM), (
            f"{p.name} exited with {p.popen.returncode if p.popen else None}\n{logs}"
        )

    # Nothing lost, nothing doubled: each committed position applied or ignored once.
    committed = sum(cursors.values())
    assert committed >= 3 * TRANSACTIONS  # a retried commit whose outcome was lost adds one
    counted = _one(
        clean_db.product_dsn,
        "SELECT sum(applied_count + ignored_count) FROM stream_progress"
        " WHERE tenant_id LIKE 'pgr-%%'",
    )
    assert counted == committed, logs
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        accepted = conn.execute(
            "SELECT tenant_id, item_id, revision FROM catalog_item WHERE tenant_id LIKE 'pgr-%'"
            " ORDER BY 1, 2"
        ).fetchall()
    with psycopg.connect(clean_db.product_dsn) as conn:
        projected = conn.execute(
            "SELECT tenant_id, item_id, revision FROM product_item WHERE tenant_id LIKE 'pgr-%'"
            " ORDER BY 1, 2"
        ).fetchall()
    assert projected == accepted
