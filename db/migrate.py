"""Apply the Alembic migrations of the three databases."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import URL, create_engine

from db.settings import DatabaseSettings
from db.tables import Database, metadata_of

DATABASES: tuple[Database, ...] = ("control", "resolver", "product")
_MIGRATIONS = Path(__file__).parent / "migrations"


def sqlalchemy_url(dsn: str) -> str:
    """Turn a libpq URL into one SQLAlchemy opens with psycopg 3.

    A URL naming several hosts (``h1:p1,h2:p2``: a primary and its standby behind
    ``target_session_attrs=read-write``) has no place in SQLAlchemy's URL grammar; it
    takes them as one ``host`` query parameter each, which its psycopg dialect hands
    back to libpq as the same list.
    """
    params = conninfo_to_dict(dsn)
    hosts = str(params.get("host") or "").split(",")
    if len(hosts) < 2:
        for scheme in ("postgresql://", "postgres://"):
            if dsn.startswith(scheme):
                return "postgresql+psycopg://" + dsn[len(scheme) :]
        return dsn
    ports = str(params.pop("port", None) or "").split(",")
    ports = ports * len(hosts) if len(ports) == 1 else ports
    params.pop("host")
    user, password, database = (params.pop(k, None) for k in ("user", "password", "dbname"))
    query: dict[str, str | list[str]] = {k: str(v) for k, v in params.items()}
    query["host"] = [f"{h}:{p}" if p else h for h, p in zip(hosts, ports, strict=True)]
    url = URL.create(
        "postgresql+psycopg",
        username=None if user is None else str(user),
        password=None if password is None else str(password),
        database=None if database is None else str(database),
        query=query,
    )
    return url.render_as_string(hide_password=False)


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
