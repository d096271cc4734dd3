"""Bad configuration fails at start-up and names the variable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from infra.config import ConfigurationError, load
from producers.relay.settings import RelaySettings


def test_invalid_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAPLESS_RELAY_BATCH_SIZE", "lots")
    with pytest.raises(ConfigurationError, match="GAPLESS_RELAY_BATCH_SIZE"):
        load(RelaySettings)


def test_out_of_range_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAPLESS_RELAY_POLL_SECONDS", "-1")
    with pytest.raises(ConfigurationError, match="GAPLESS_RELAY_POLL_SECONDS"):
        load(RelaySettings)


def test_valid_variables_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAPLESS_RELAY_BATCH_SIZE", "42")
    assert load(RelaySettings).relay_batch_size == 42


def test_secret_settings_never_echo_what_was_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from producers.settings import ApiSettings

    monkeypatch.setenv("GAPLESS_API_TOKENS", "a-raw-token-pasted-by-mistake")
    with pytest.raises(ConfigurationError, match="GAPLESS_API_TOKENS") as caught:
        load(ApiSettings)
    assert "a-raw-token-pasted-by-mistake" not in str(caught.value)


def _local_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Start from no GAPLESS_* database variables; whatever ``use_local_services`` sets
    is undone after the test (each name is recorded by setting it first)."""
    from infra.local.services import local_environment

    monkeypatch.setenv("GAPLESS_LOCAL_DIR", str(tmp_path))
    for name in local_environment():
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def test_local_services_split_the_services_login_from_the_owner(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from db.settings import DatabaseSettings
    from infra.config import use_local_services
    from infra.local.postgres import APP_LOGIN

    _local_only(monkeypatch, tmp_path)
    use_local_services()
    settings = DatabaseSettings()
    services, owner = (
        conninfo_to_dict(settings.resolver_dsn),
        conninfo_to_dict(settings.resolver_owner_dsn),
    )
    assert (services["user"], owner["user"]) == (APP_LOGIN, "postgres")
    assert services["dbname"] == owner["dbname"] == "resolver"


def test_a_configured_resolver_dsn_is_never_paired_with_the_local_owner(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Pairing it with the local ``resolver`` database's owner would migrate another
    database than the one the services use."""
    from db.settings import DatabaseSettings
    from infra.config import use_local_services

    _local_only(monkeypatch, tmp_path)
    monkeypatch.setenv("GAPLESS_RESOLVER_DSN", "postgresql://someone@db.example/catalog")
    use_local_services()
    assert "GAPLESS_RESOLVER_MIGRATION_DSN" not in os.environ
    assert DatabaseSettings().resolver_owner_dsn == "postgresql://someone@db.example/catalog"
