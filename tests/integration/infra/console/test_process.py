"""``gapless console`` runs the console as a process of its own: it starts, answers
``/readyz`` once its databases do, serves the login page, and stops cleanly on
SIGTERM; bad configuration stops it at start-up naming the variable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from db.settings import DatabaseSettings
from infra.processes import free_port
from tests.integration.infra.console.conftest import TOKENS


def _command(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "infra.cli", "console"],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _ready(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, log.read_text()
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "not ready after 60 s:\n" + log.read_text()
        time.sleep(0.1)


def test_the_process_starts_serves_and_stops_on_sigterm(
    db_settings: DatabaseSettings, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, GAPLESS_API_TOKENS=TOKENS, GAPLESS_CONSOLE_PORT=str(port))
    log = tmp_path / "console.log"
    process = _command(env, log)
    try:
        _ready(process, url, log)
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
        login = httpx.get(f"{url}/login", timeout=5)
        assert login.status_code == 200 and 'name="token"' in login.text
        assert httpx.get(f"{url}/streams", timeout=5).status_code == 303
        assert "gapless_console_requests_total" in httpx.get(f"{url}/metrics", timeout=5).text
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    assert code in (0, -signal.SIGTERM), log.read_text()
    assert "Application shutdown complete" in log.read_text()


def test_bad_configuration_stops_it_at_start_up_naming_the_variable(
    db_settings: DatabaseSettings, tmp_path: Path
) -> None:
    env = dict(os.environ, GAPLESS_API_TOKENS=TOKENS, GAPLESS_CONSOLE_PORT="70000")
    log = tmp_path / "console.log"
    assert _command(env, log).wait(timeout=60) != 0
    assert "GAPLESS_CONSOLE_PORT" in log.read_text()
    env = dict(os.environ, GAPLESS_API_TOKENS="not-a-hash:*=admin")
    assert _command(env, log).wait(timeout=60) != 0
    assert "GAPLESS_API_TOKENS" in log.read_text() and "not-a-hash" not in log.read_text()
