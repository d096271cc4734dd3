"""Bad configuration fails at start-up and names the variable."""

from __future__ import annotations

import pytest

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
