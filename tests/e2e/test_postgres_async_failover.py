"""An asynchronous standby promoted after the primary's death loses the tail it had
not received: that behaves like a restore nobody fenced, and is caught and repaired
as one.

A private formation with an asynchronous standby holding the resolver's database (the
projections and the epochs stay on the suite's server, as they do when they live
elsewhere); the resolver API, the relay and the agents deployed against them. The
primary's WAL sender is stopped (SIGSTOP), so the standby receives nothing more;
decisions go on committing on the primary and the agents apply them; then the
primary dies and the standby is promoted without that tail. The writes that follow
take positions the agents already hold under other events: the stream is flagged
rewound (``position_reused`` or ``report_beyond_committed``) and its writes are
refused ``HISTORY_REWOUND``. ``gapless fence-epoch --wait`` repairs it: the next
epoch, the projections rebuilt from the promoted state, writes accepted again, and
the projection equal to the resolver's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource, rewound_now
from db.exceptions import HistoryRewound
from db.unit_of_work import UnitOfWork
from infra.chaos.cluster import pg_formation
from infra.chaos.services import port_base
from infra.demo.projection_check import compare_serving
from infra.local import postgres_ha
from infra.local.layout import HOST, Layout
from infra.processes import Deployed
from producers.resolver.catalog_items import ItemChange
from schemas.codec import CODEC
from tests.e2e.test_postgres_failover import _dsns, _processes
from tests.fixtures.decisions import accept
from tests.fixtures.waits import wait_for

pytestmark = pytest.mark.slow

TENANT, CATALOG = f"fa-{uuid.uuid4().hex[:8]}", "c1"  # the epochs outlive the test
CONSUMER = "product-applier"


@pytest.fixture()
def formation(services: dict[str, str]) -> Iterator[Layout]:
    with pg_formation(print, port_base(), "async", "pg-async-test") as layout:
        yield layout


class Writer:
    """Rule decisions, one new item each, through the write path on the formation."""

    def __init__(self, dsns: dict[str, str]) -> None:
        self._pool = ConnectionPool(
            dsns["GAPLESS_RESOLVER_DSN"],
            min_size=1,
            max_size=1,
            check=ConnectionPool.check_connection,  # the primary changes under it
            open=True,
        )
        self._epochs = EpochSource(dsns["GAPLESS_CONTROL_DSN"])
        self.written = 0

    def write(self, count: int = 1) -> None:
        for _ in range(count):
            n = self.written
            with UnitOfWork(self._pool, self._epochs, CODEC) as uow:
                accept(uow, TENANT, CATALOG, ItemChange(TENANT, CATALOG, f"i{n}", "lamp", f"{n}"))
            self.written += 1

    def close(self) -> None:
        self._pool.close()
        self._epochs.close()


def _one(dsn: str, query: str, *params: object) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


def _cursor(dsns: dict[str, str], epoch: int) -> int:
    return _one(
        dsns["GAPLESS_RESOLVER_MIGRATION_DSN"],
        "SELECT position FROM stream_cursor WHERE tenant_id = %s AND history_epoch = %s",
        TENANT,
        epoch,
    )


def _progress(dsns: dict[str, str], epoch: int) -> int:
    return _one(
        dsns["GAPLESS_PRODUCT_DSN"],
        "SELECT position FROM stream_progress WHERE tenant_id = %s AND history_epoch = %s",
        TENANT,
        epoch,
    )


def _stop_wal_sender(layout: Layout) -> int:
    """SIGSTOP the primary's WAL sender: the standby receives nothing from here on."""
    primary = postgres_ha.primary(layout)
    assert primary is not None
    with psycopg.connect(host=HOST, port=primary.port, user="postgres", dbname="postgres") as c:
        row = c.execute("SELECT pid FROM pg_stat_replication").fetchone()
    assert row is not None, "the standby is not streaming"
    os.kill(int(row[0]), signal.SIGSTOP)
    return int(row[0])


def _flagged(dsns: dict[str, str]) -> list[str]:
    with psycopg.connect(dsns["GAPLESS_CONTROL_DSN"], autocommit=True) as conn:
        return [r.signal for r in rewound_now(conn) if r.tenant_id == TENANT]


def test_a_tail_lost_by_an_asynchronous_failover_is_flagged_and_fenced(
    formation: Layout, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:12]
    # Only the resolver's database on the formation: the projections and the epochs
    # keep what they saw, as they do when they live elsewhere. (Failed over together,
    # they would lose the same tail with it, silently and consistently.)
    on_formation = _dsns(formation)
    dsns = {
        **{k: os.environ[k] for k in ("GAPLESS_PRODUCT_DSN", "GAPLESS_CONTROL_DSN")},
        "GAPLESS_RESOLVER_DSN": on_formation["GAPLESS_RESOLVER_DSN"],
        "GAPLESS_RESOLVER_MIGRATION_DSN": on_formation["GAPLESS_RESOLVER_MIGRATION_DSN"],
    }
    env = {
        **os.environ,
        **dsns,
        "GAPLESS_EVENTS_TOPIC": f"test.events.{suffix}",
        "GAPLESS_CONTROL_TOPIC": f"test.control.{suffix}",
        "GAPLESS_REBUILD_STATUS_TOPIC": f"test.status.{suffix}",
        "GAPLESS_AGENTS_REPORT_INTERVAL_SECONDS": "1",
    }
    migrate = Deployed("migrate", ["migrate", "--no-local"], env, tmp_path / "migrate.log")
    migrate.start()
    assert migrate.popen is not None and migrate.popen.wait(180) == 0, migrate.tail()
    processes = _processes(env, tmp_path)
    writer = Writer(dsns)
    try:
        for p in processes:
            p.start()
        wait_for(lambda: all(p.health() == 200 for p in processes), "every process ready", 120)
        writer.write(5)
        wait_for(lambda: _progress(dsns, 1) == _cursor(dsns, 1) > 0, "the first applied", 60)

        _stop_wal_sender(formation)
        writer.write(5)  # committed on the primary only, and applied
        applied = _cursor(dsns, 1)
        wait_for(lambda: _progress(dsns, 1) == applied, "the tail applied", 60)

        old = postgres_ha.primary(formation)
        assert old is not None
        postgres_ha.kill_node(formation, old, print)
        wait_for(
            lambda: postgres_ha.primary(formation) not in (None, old), "the standby promoted", 120
        )
        lost = applied - _cursor(dsns, 1)
        assert lost > 0, "the promoted standby had the whole history"

        # Writes go on over the lost positions until the stream is flagged; then refused.
        def refused() -> bool:
            try:
                writer.write()
            except HistoryRewound:
                return True
            except psycopg.OperationalError:
                pass  # no primary yet
            return False

        wait_for(refused, "writes refused HISTORY_REWOUND", 120)
        assert _flagged(dsns), "refused without a flag"
        assert all(p.alive() for p in processes), "\n".join(p.tail() for p in processes)

        fence = [
            sys.executable, "-m", "infra.cli", "fence-epoch", "--tenant", TENANT,
            "--catalog", CATALOG, "--epoch", "1", "--reason", "async failover lost a tail",
            "--wait", "--timeout", "300",
        ]  # fmt: skip
        done = subprocess.run(fence, env=env, capture_output=True, text=True, timeout=400)
        assert done.returncode == 0, done.stdout + done.stderr
        assert _flagged(dsns) == []

        writer.write(3)  # at the next epoch
        wait_for(lambda: _progress(dsns, 2) == _cursor(dsns, 2) > 0, "epoch 2 applied", 120)
        found = compare_serving(
            dsns["GAPLESS_RESOLVER_MIGRATION_DSN"], dsns["GAPLESS_PRODUCT_DSN"], TENANT, CONSUMER
        )
        assert sum(found.rows.values()) > 0 and found.differences == [], found.differences
        assert all(p.health() == 200 for p in processes)
    finally:
        writer.close()
        for p in reversed(processes):
            p.stop()
    logs = "\n".join(p.tail() for p in processes)
    for p in processes:
        assert p.popen is not None and p.popen.returncode in (0, -signal.SIGTERM), logs
    print(f"lost tail: {lost} positions; flagged and fenced")
