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
