"""Liveness and readiness, separately, of the producers' long-running processes:
``/healthz`` answers 200 from the start, also with the database away; ``/readyz``
only once the process can do its work (a pass done, the database answering)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from db.settings import DatabaseSettings
from infra.processes import free_port
from producers.api import create_app
from producers.settings import ApiSettings
from schemas.http.auth import token_hash


def _nowhere() -> str:
    return f"postgresql://nobody@127.0.0.1:{free_port()}/resolver"


def _wait_status(url: str, status: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    last: int | None = None
    while last != status:
        assert process.poll() is None, process.communicate()[0].decode()[-2000:]
        assert time.monotonic() < deadline, f"{url} answered {last}, not {status}"
        try:
            last = httpx.get(url, timeout=2).status_code
        except httpx.HTTPError:
            last = None
        if last != status:
            time.sleep(0.2)


@pytest.mark.parametrize(
    ("command", "port_variable"),
    [("prune", "GAPLESS_PRUNE_HTTP_PORT"), ("sweep-jobs", "GAPLESS_SWEEP_HTTP_PORT")],
)
@pytest.mark.parametrize("database", ["answers", "away"])
def test_a_looping_process_is_alive_at_once_and_ready_after_a_pass(
    clean_db: DatabaseSettings, command: str, port_variable: str, database: str
) -> None:
    port = free_port()
    env = dict(os.environ, **{port_variable: str(port)})
    if database == "away":
        env["GAPLESS_RESOLVER_DSN"] = _nowhere()
    process = subprocess.Popen(
        [sys.executable, "-m", "infra.cli", command],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_status(base + "/healthz", 200, process)
        if database == "answers":
            _wait_status(base + "/readyz", 200, process)
            assert httpx.get(base + "/metrics", timeout=2).status_code == 200
        else:
            # Passes fail and are retried: alive all along, never ready.
            _wait_logged(process, "failed on the database")
            assert httpx.get(base + "/readyz", timeout=2).status_code == 503
            assert httpx.get(base + "/healthz", timeout=2).status_code == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _wait_logged(process: subprocess.Popen[bytes], text: str) -> None:
    assert process.stdout is not None
    deadline = time.monotonic() + 30
    seen = b""
    while text.encode() not in seen:
        assert time.monotonic() < deadline, f"never logged {text!r}:\n{seen.decode()[-2000:]}"
        line = process.stdout.readline()
        assert line, f"exited before logging {text!r}:\n{seen.decode()[-2000:]}"
        seen += line


@pytest.mark.parametrize(("dsn", "ready"), [("real", 200), ("away", 503)])
def test_the_resolver_api_is_alive_regardless_and_ready_when_its_database_answers(
    clean_db: DatabaseSettings, dsn: str, ready: int
) -> None:
    settings = ApiSettings(
        api_tokens=SecretStr(f"{token_hash('t')}:*=admin"),
        resolver_dsn=clean_db.resolver_dsn if dsn == "real" else _nowhere(),
        control_dsn=clean_db.control_dsn,
    )
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").status_code == 200
        answer = client.get("/readyz")
        assert answer.status_code == ready
        if ready == 503:
            assert answer.json()["code"] == "UNAVAILABLE"
