"""The resolver's services log in with only the application role's grants (INV-05,
INV-08), while migrations and test set-up use the owner's login."""

from __future__ import annotations

import psycopg
import psycopg.errors
import pytest
from fastapi.testclient import TestClient
from psycopg.conninfo import conninfo_to_dict
from pydantic import SecretStr

from db.settings import DatabaseSettings
from db.tables.domain import APP_ROLE
from producers.api import create_app
from producers.capture.settings import SweeperSettings
from producers.http.deps import Resources
from producers.relay.settings import RelaySettings
from producers.resolver.splits import SplitItem, Successor
from producers.retention.settings import RetentionSettings
from producers.settings import ApiSettings
from schemas.http.auth import token_hash
from tests.integration.producers.resolver.conftest import UowFactory, add_item
from tests.integration.producers.resolver.test_decisions import decide


def login(dsn: str) -> tuple[object, ...]:
    """(current_user, superuser?, member of the application role?, owns catalog_item?)"""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT current_user, r.rolsuper, pg_has_role(current_user, %s, 'USAGE'),"
            " pg_has_role(current_user, (SELECT tableowner FROM pg_tables"
            "  WHERE tablename = 'catalog_item' AND schemaname = 'public'), 'USAGE')"
            " FROM pg_roles r WHERE r.rolname = current_user",
            (APP_ROLE,),
        ).fetchone()
    assert row is not None
    return tuple(row)


def test_every_resolver_service_is_configured_with_the_application_login(
    clean_db: DatabaseSettings,
) -> None:
    app_login = conninfo_to_dict(clean_db.resolver_dsn)["user"]
    assert login(clean_db.resolver_dsn) == (app_login, False, True, False)
    assert login(clean_db.resolver_owner_dsn)[3] is True  # migrations: the owner
    # The processes read GAPLESS_RESOLVER_DSN through their own settings.
    for settings in (RelaySettings(), RetentionSettings(), SweeperSettings()):
        assert settings.resolver_dsn == clean_db.resolver_dsn, type(settings).__name__


def test_the_resolver_apis_connections_are_the_application_login(
    clean_db: DatabaseSettings,
) -> None:
    settings = ApiSettings(api_tokens=SecretStr(f"{token_hash('t')}:*"))
    app = create_app(settings)
    with TestClient(app):
        resources: Resources = app.state.resources
        for pool in (resources.pool, resources.uow_pool):
            with pool.connection() as conn:
                user = conn.execute("SELECT current_user").fetchone()
            assert user == (conninfo_to_dict(clean_db.resolver_dsn)["user"],)
            assert user != (conninfo_to_dict(clean_db.resolver_owner_dsn)["user"],)


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM catalog_item",
        "DELETE FROM catalog_item WHERE status = 'split'",
        "DELETE FROM decision",
        "UPDATE decision SET rationale = 'rewritten'",
        "DELETE FROM decision_effect",
        "UPDATE catalog_item SET decision_id = NULL",  # allowed, and then NOT NULL refuses
    ],
)
def test_after_a_split_the_application_login_cannot_remove_history(
    uow: UowFactory, clean_db: DatabaseSettings, statement: str
) -> None:
    """A split keeps its source item and every earlier decision; the services' login
    could not remove them even if its code tried."""
    add_item(uow, "i1")
    decide(uow, SplitItem("i1", (Successor("i1-a", "a"),)), action="split")
    with psycopg.connect(clean_db.resolver_owner_dsn) as conn:
        before = conn.execute(
            "SELECT (SELECT count(*) FROM catalog_item), (SELECT count(*) FROM decision)"
        ).fetchone()
    refused = (
        psycopg.errors.NotNullViolation
        if "decision_id = NULL" in statement
        else psycopg.errors.InsufficientPrivilege
    )
    with psycopg.connect(clean_db.resolver_dsn) as conn, pytest.raises(refused):
        conn.execute(statement)
    with psycopg.connect(clean_db.resolver_owner_dsn) as conn:
        after = conn.execute(
            "SELECT (SELECT count(*) FROM catalog_item), (SELECT count(*) FROM decision)"
        ).fetchone()
    assert before == after == (2, 2)
