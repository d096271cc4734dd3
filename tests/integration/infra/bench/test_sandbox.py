"""The bench's sandbox against real PostgreSQL and Kafka: its own databases, migrated
(whatever migration DSN the environment names), and gone afterwards."""

from __future__ import annotations

import psycopg
import pytest

from db.settings import DatabaseSettings
from infra.bench.sandbox import sandbox


def _exists(owner_dsn: str, name: str) -> bool:
    with psycopg.connect(owner_dsn) as conn:
        row = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    return row is not None


def test_the_sandbox_migrates_its_own_databases_and_drops_them(
    db_settings: DatabaseSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Services run with a separate owner DSN for migrations: the sandbox must not
    # follow it to the shared database.
    monkeypatch.setenv("GAPLESS_RESOLVER_MIGRATION_DSN", db_settings.resolver_owner_dsn)
    with sandbox(lambda _message: None) as box:
        resolver = box.databases.resolver_owner_dsn
        name = resolver.rsplit("/", 1)[1]
        assert name.startswith("gapless_bench_") and name.endswith("_resolver")
        with psycopg.connect(resolver) as conn:
            tables = {
                r[0]
                for r in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                ).fetchall()
            }
        assert {"stream_cursor", "outbox", "decision", "catalog_item"} <= tables
    assert not _exists(db_settings.resolver_owner_dsn, name)
