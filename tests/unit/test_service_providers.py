"""The test fixtures' service provider: an unknown choice and a bad port range stop
the session at start, naming the variable."""

from __future__ import annotations

import pytest

from infra.local import ServiceError
from tests.fixtures.providers import VARIABLE, provider
from tests.fixtures.providers.containers import PORTS_VARIABLE, port_range


def test_an_unknown_provider_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(VARIABLE, "docker-compose")
    with pytest.raises(ServiceError) as refused:
        provider(print)
    assert f"{VARIABLE}='docker-compose'" in str(refused.value)
    assert "local, testcontainers" in str(refused.value)


@pytest.mark.parametrize("raw", ["21100", "x-y", "21200-21100", "30000-40000", "80-90"])
def test_a_port_range_outside_1024_to_32767_is_refused(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv(PORTS_VARIABLE, raw)
    with pytest.raises(ServiceError, match=PORTS_VARIABLE):
        port_range()


def test_the_port_range_is_inclusive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORTS_VARIABLE, "21100-21103")
    assert list(port_range()) == [21100, 21101, 21102, 21103]
    monkeypatch.delenv(PORTS_VARIABLE)
    assert port_range().start == 24100 and port_range().stop <= 32768
