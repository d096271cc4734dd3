"""Apply the Alembic migrations of the three databases."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine

from db.settings import DatabaseSettings
from db.tables import Database, metadata_of

DATABASES: tuple[Database, ...] = ("control", "resolver", "product")
_MIGRATIONS = Path(__file__).parent / "migrations"


def sqlalchemy_url(dsn: str) -> str:
    """Turn a libpq URL into one SQLAlchemy opens with psycopg 3."""
    for scheme in ("postgresql://", "postgres://"):
        if dsn.startswith(scheme):
            return "postgresql+psycopg://" + dsn[len(scheme) :]
    return dsn


def alembic_config(database: Database, dsn: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS / database))
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(dsn).replace("%", "%%"))
    return config


def dsn_for(database: Database, settings: DatabaseSettings) -> str:
    """The DSN migrations of ``database`` run with (the resolver's owner login)."""
    return {
        "resolver": settings.resolver_owner_dsn,
        "product": settings.product_dsn,
        "control": settings.control_dsn,
    }[database]


def run_environment(database: Database) -> None:
    """What each database's Alembic ``env.py`` runs: its migrations, online, compared
    with the complete metadata of the database's tables (``db.tables.metadata_of``)."""
    from alembic import context

    url = context.config.get_main_option("sqlalchemy.url")
    assert url, "alembic_config sets sqlalchemy.url"
    engine = create_engine(url)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=metadata_of(database))
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


def upgrade_all(
    settings: DatabaseSettings | None = None, echo: Callable[[str], None] = lambda _: None
) -> None:
    """Bring every database to the newest revision; safe to run again."""
    settings = settings or DatabaseSettings()
    for database in DATABASES:
        echo(f"migrating {database}")
        # "heads": independent branches (e.g. two features in flight) all apply.
        command.upgrade(alembic_config(database, dsn_for(database, settings)), "heads")
