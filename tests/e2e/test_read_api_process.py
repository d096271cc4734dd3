"""``gapless read-api`` runs the read API as a process of its own: it starts, answers
``/readyz`` once its databases do, serves a read, and stops cleanly on SIGTERM; bad
configuration stops it at start-up naming the variable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from db.settings import DatabaseSettings
from infra.processes import free_port
from tests.integration.processors.serving.conftest import TOKENS, VIEWER, Catalog


def _command(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "infra.cli", "read-api"],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@pytest.fixture()
def catalog(clean_db: DatabaseSettings) -> Iterator[Catalog]:
    with psycopg.connect(clean_db.product_dsn, autocommit=True) as conn:
        yield Catalog(conn, clean_db)


def test_the_process_starts_serves_and_stops_on_sigterm(catalog: Catalog, tmp_path: Path) -> None:
    catalog.epoch()
    catalog.apply(3, catalog.item("i1", "Hiking boot"))
    catalog.serve(3, position=1)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, GAPLESS_API_TOKENS=TOKENS, GAPLESS_READ_API_PORT=str(port))
    log = tmp_path / "read-api.log"
    process = _command(env, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log.read_text()
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "not ready after 60 s:\n" + log.read_text()
            time.sleep(0.1)

        response = httpx.get(
            f"{url}/v1/tenants/t1/catalogs/c1/search",
            params={"q": "boot"},
            headers={"Authorization": f"Bearer {VIEWER}"},
            timeout=5,
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["served_from"] == {"history_epoch": 1, "generation": 3, "position": 1}
        assert [h["item_id"] for h in body["hits"]] == ["i1"]
        assert "gapless_read_api_requests_total" in httpx.get(f"{url}/metrics", timeout=5).text
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    # uvicorn shuts down cleanly, then re-raises the signal it caught.
    assert code in (0, -signal.SIGTERM), log.read_text()
    assert "Application shutdown complete" in log.read_text()


def test_bad_configuration_stops_it_at_start_up_naming_the_variable(
    db_settings: DatabaseSettings, tmp_path: Path
) -> None:
    env = dict(os.environ, GAPLESS_API_TOKENS=TOKENS, GAPLESS_READ_API_PORT="70000")
    log = tmp_path / "read-api.log"
    code = _command(env, log).wait(timeout=60)
    assert code != 0
    assert "GAPLESS_READ_API_PORT" in log.read_text()
