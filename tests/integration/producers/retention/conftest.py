"""Fixtures of the retention tests: an API client with tenant-scoped tokens, and
slowed-down deletes that widen the window of every pruning race."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from db.settings import DatabaseSettings
from producers.api import create_app
from producers.settings import ApiSettings
from schemas.http.auth import token_hash

T1_TOKEN = "token-of-tenant-t1"  # may act on t1 and t3
ALL_TOKEN = "token-of-every-tenant"


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture()
def api_settings(clean_db: DatabaseSettings) -> ApiSettings:
    return ApiSettings(
        api_tokens=SecretStr(f"{token_hash(T1_TOKEN)}:t1|t3,{token_hash(ALL_TOKEN)}:*"),
        resolver_dsn=clean_db.resolver_dsn,
        control_dsn=clean_db.control_dsn,
        lease_max_ttl_seconds=600,
    )


@pytest.fixture()
def client(api_settings: ApiSettings) -> Iterator[TestClient]:
    with TestClient(create_app(api_settings), headers=auth(T1_TOKEN)) as test_client:
        yield test_client


@pytest.fixture()
def slow_deletes(clean_db: DatabaseSettings) -> Iterator[None]:
    """Each deleted outbox row takes 2 ms, so a prune batch stays open long enough
    for concurrent registrations, leases and pruners to land inside it. The trigger is
    schema, so the owner creates it."""
    with psycopg.connect(clean_db.resolver_owner_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION test_slow_delete() RETURNS trigger"
            " LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.002); RETURN OLD; END $$"
        )
        conn.execute("DROP TRIGGER IF EXISTS test_slow_delete ON outbox")
        conn.execute(
            "CREATE TRIGGER test_slow_delete BEFORE DELETE ON outbox"
            " FOR EACH ROW EXECUTE FUNCTION test_slow_delete()"
        )
        try:
            yield
        finally:
            conn.execute("DROP TRIGGER IF EXISTS test_slow_delete ON outbox")
            conn.execute("DROP FUNCTION IF EXISTS test_slow_delete()")
