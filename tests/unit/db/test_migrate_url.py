"""The migrations open the database through SQLAlchemy, whose URL grammar has no
place for libpq's host lists: a failover pair's DSN must still reach both hosts."""

from __future__ import annotations

from sqlalchemy import create_engine

from db.migrate import sqlalchemy_url


def _connect_args(dsn: str) -> dict[str, object]:
    engine = create_engine(sqlalchemy_url(dsn))
    _args, kwargs = engine.dialect.create_connect_args(engine.url)
    return {k: v for k, v in kwargs.items() if k != "context"}


def test_a_single_host_url_only_changes_its_scheme() -> None:
    dsn = "postgresql://u@127.0.0.1:15432/resolver"
    assert sqlalchemy_url(dsn) == "postgresql+psycopg://u@127.0.0.1:15432/resolver"
    assert sqlalchemy_url("postgres://u@h/d") == "postgresql+psycopg://u@h/d"


def test_a_host_list_reaches_libpq_as_the_same_list_with_its_parameters() -> None:
    dsn = "postgresql://app@10.0.0.1:5432,10.0.0.2:5433/resolver?target_session_attrs=read-write"
    assert _connect_args(dsn) == {
        "dbname": "resolver",
        "user": "app",
        "host": "10.0.0.1,10.0.0.2",
        "port": "5432,5433",
        "target_session_attrs": "read-write",
    }


def test_a_password_with_reserved_characters_survives() -> None:
    args = _connect_args("postgresql://app:p%40ss%2Fw@h1:1,h2:2/d")
    assert args["password"] == "p@ss/w" and args["host"] == "h1,h2"
