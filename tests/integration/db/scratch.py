"""A resolver database of a test's own, for a migration test: created empty, migrated
to a revision when one is named, dropped afterwards whatever happened."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from alembic import command

from db.migrate import alembic_config
from db.settings import DatabaseSettings


@contextmanager
def scratch_database(
    settings: DatabaseSettings, suffix: str, revision: str | None = None
) -> Iterator[str]:
    """The DSN of ``<resolver database>_<suffix>``, at ``revision`` (None: empty)."""
    base, _, name = settings.resolver_owner_dsn.rpartition("/")
    scratch = f"{name}_{suffix}"

    def drop() -> None:
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{scratch}" WITH (FORCE)')

    drop()
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{scratch}"')
    try:
        dsn = f"{base}/{scratch}"
        if revision is not None:
            command.upgrade(alembic_config("resolver", dsn), revision)
        yield dsn
    finally:
        drop()
