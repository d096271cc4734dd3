"""Resolver API and pruner settings fail at start-up naming the variable."""

from __future__ import annotations

import pytest

from infra.config import ConfigurationError, load
from producers.retention.settings import RetentionSettings
from producers.settings import ApiSettings
from schemas.http.auth import token_hash


def test_the_api_needs_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GAPLESS_API_TOKENS", raising=False)
    with pytest.raises(ConfigurationError, match="GAPLESS_API_TOKENS"):
        load(ApiSettings)


def test_a_malformed_token_list_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAPLESS_API_TOKENS", "not-a-hash:*")
    with pytest.raises(ConfigurationError, match="GAPLESS_API_TOKENS"):
        load(ApiSettings)


def test_tokens_stay_secret_in_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    digest = token_hash("secret")
    monkeypatch.setenv("GAPLESS_API_TOKENS", f"{digest}:t1")
    monkeypatch.setenv("GAPLESS_RESOLVER_API_PORT", "58123")
    settings = load(ApiSettings)
    assert digest not in repr(settings)
    assert settings.resolver_api_port == 58123
    assert settings.grants()[digest].allows("t1")


def test_pruner_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAPLESS_RETENTION_AGE_SECONDS", "-5")
    with pytest.raises(ConfigurationError, match="GAPLESS_RETENTION_AGE_SECONDS"):
        load(RetentionSettings)
    monkeypatch.setenv("GAPLESS_RETENTION_AGE_SECONDS", "3600")
    monkeypatch.setenv("GAPLESS_PRUNE_BATCH_SIZE", "250")
    settings = load(RetentionSettings)
    assert (settings.retention_age_seconds, settings.prune_batch_size) == (3600, 250)
