"""The port check names who holds a port, from /proc, and the variable that moves it."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from infra.local.ports import PortTaken, bindable, holders, require_free


@pytest.fixture
def listening() -> Iterator[int]:
    """A port this test process listens on."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield int(held.getsockname()[1])


def test_a_listening_port_is_not_bindable_and_its_holder_is_this_process(listening: int) -> None:
    assert not bindable("127.0.0.1", listening)
    found = holders(listening)
    assert [h.pid for h in found] == [os.getpid()]
    assert "python" in found[0].command or "pytest" in found[0].command


def test_require_free_names_the_holder_and_the_variable(listening: int) -> None:
    with pytest.raises(PortTaken) as raised:
        require_free("127.0.0.1", listening, "postgres", "GAPLESS_LOCAL_PG_PORT")
    text = str(raised.value)
    assert f"postgres: port {listening} is taken by pid {os.getpid()} (" in text
    assert "set GAPLESS_LOCAL_PG_PORT to a free port below 32768" in text
    assert raised.value.variable == "GAPLESS_LOCAL_PG_PORT"


def test_a_closed_port_is_free(listening: int) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    require_free("127.0.0.1", port, "s3", "GAPLESS_LOCAL_S3_PORT")
    assert holders(port) == []
