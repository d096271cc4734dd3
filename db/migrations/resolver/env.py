"""Alembic environment for the resolver database (run through ``db.migrate``)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

# Importing a table module adds its tables to the resolver metadata.
import db.tables.attributes
import db.tables.capture_work
import db.tables.domain
import db.tables.identity
import db.tables.intake
import db.tables.retention  # noqa: F401
from db.tables.resolver import metadata

config = context.config


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url, "db.migrate sets sqlalchemy.url"
    engine = create_engine(url)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=metadata)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations_online()
