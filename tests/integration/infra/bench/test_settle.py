"""Settling the databases between bench phases, against real PostgreSQL: what an
earlier phase left (dead rows, stale statistics) is vacuumed and analysed before the
next phase measures."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from db.settings import DatabaseSettings
from infra.bench.settle import settle

PROBE = "bench_settle_probe"
DEADLINE_S = 15.0


@pytest.fixture()
def probe(clean_db: DatabaseSettings) -> Iterator[str]:
    """A table with dead rows that autovacuum is told to leave alone."""
    dsn = clean_db.product_dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {PROBE}")
        conn.execute(
            f"CREATE TABLE {PROBE} (id int PRIMARY KEY, v text) WITH (autovacuum_enabled = off)"
        )
        conn.execute(f"INSERT INTO {PROBE} SELECT g, 'x' FROM generate_series(1, 5000) g")
        conn.execute(f"DELETE FROM {PROBE} WHERE id % 2 = 0")
    try:
        yield dsn
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {PROBE}")


def _stats(dsn: str) -> tuple[int, bool, bool]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT n_dead_tup, last_vacuum IS NOT NULL, last_analyze IS NOT NULL"
            " FROM pg_stat_user_tables WHERE relname = %s",
            (PROBE,),
        ).fetchone()
    assert row is not None
    return int(row[0]), bool(row[1]), bool(row[2])


def test_settling_vacuums_and_analyses_what_an_earlier_phase_left(
    clean_db: DatabaseSettings, probe: str
) -> None:
    assert _stats(probe)[1:] == (False, False)
    echoed: list[str] = []
    took = settle([probe, clean_db.resolver_owner_dsn, clean_db.control_dsn], echoed.append)
    assert took > 0
    deadline = time.monotonic() + DEADLINE_S
    while (stats := _stats(probe)) != (0, True, True):
        assert time.monotonic() < deadline, f"not vacuumed and analysed: {stats}"
        time.sleep(0.1)
    assert not any("still busy" in line for line in echoed), echoed
