"""The probe server answers liveness and readiness separately, and the heartbeat is
alive from the start but ready only after a pass."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from producers.http.probes import Heartbeat, serve


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def state() -> dict[str, bool]:
    return {"alive": True, "ready": False}


@pytest.fixture
def url(state: dict[str, bool]) -> Iterator[str]:
    port = _port()
    server = serve("127.0.0.1", port, lambda: state["alive"], lambda: state["ready"])
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()


def test_alive_but_not_ready_answers_200_on_healthz_and_503_on_readyz(
    url: str, state: dict[str, bool]
) -> None:
    assert httpx.get(url + "/healthz").status_code == 200
    assert httpx.get(url + "/readyz").status_code == 503
    state["ready"] = True
    assert httpx.get(url + "/readyz").status_code == 200


def test_a_stalled_loop_is_neither_alive_nor_ready(url: str, state: dict[str, bool]) -> None:
    state.update(alive=False, ready=True)
    assert httpx.get(url + "/healthz").status_code == 503
    assert httpx.get(url + "/readyz").status_code == 503


def test_metrics_and_unknown_paths(url: str) -> None:
    metrics = httpx.get(url + "/metrics")
    assert metrics.status_code == 200
    assert "python_info" in metrics.text or "process_" in metrics.text
    assert httpx.get(url + "/nothing").status_code == 404


def test_a_heartbeat_is_alive_from_the_start_and_ready_only_after_a_pass() -> None:
    beat = Heartbeat(stale_after=60.0)
    assert beat.alive()
    assert not beat.passed_lately()
    beat.looped()
    assert not beat.passed_lately()
    beat.passed()
    assert beat.alive() and beat.passed_lately()


def test_a_heartbeat_goes_stale() -> None:
    beat = Heartbeat(stale_after=0.05)
    beat.passed()
    deadline = time.monotonic() + 5
    while beat.alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not beat.alive()
    assert not beat.passed_lately()
