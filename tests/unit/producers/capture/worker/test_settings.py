"""The capture worker's claim duration, and the old name it is still read under."""

from __future__ import annotations

import logging

import pytest

from infra.config import ConfigurationError, load
from producers.capture.worker.settings import WorkerSettings

CURRENT, OLD = "GAPLESS_WORKER_CLAIM_SECONDS", "GAPLESS_WORKER_LEASE_SECONDS"


@pytest.fixture(autouse=True)
def _neither(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CURRENT, raising=False)
    monkeypatch.delenv(OLD, raising=False)


def test_the_claim_lasts_five_minutes_by_default() -> None:
    assert load(WorkerSettings).worker_claim_seconds == 300


def test_the_claim_duration_is_read_from_its_variable(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(CURRENT, "42")
    with caplog.at_level(logging.WARNING, logger="infra.config"):
        assert load(WorkerSettings).worker_claim_seconds == 42
    assert caplog.records == []


def test_the_old_name_still_works_and_is_named_deprecated(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(OLD, "7")
    with caplog.at_level(logging.WARNING, logger="infra.config"):
        assert load(WorkerSettings).worker_claim_seconds == 7
    [warning] = caplog.records
    assert OLD in warning.getMessage() and CURRENT in warning.getMessage()


def test_the_new_name_wins_over_the_old(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OLD, "7")
    monkeypatch.setenv(CURRENT, "9")
    assert load(WorkerSettings).worker_claim_seconds == 9


def test_a_bad_value_under_the_old_name_names_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OLD, "1")  # below the 5 s minimum
    with pytest.raises(ConfigurationError) as caught:
        load(WorkerSettings)
    assert f"{CURRENT} or {OLD}: " in str(caught.value)


def test_the_field_name_sets_it_in_code() -> None:
    assert WorkerSettings(worker_claim_seconds=11).worker_claim_seconds == 11
