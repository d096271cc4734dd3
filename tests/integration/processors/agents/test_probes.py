"""The agents' probes, separately: ``/healthz`` answers as soon as the worker's web
server runs, also with the product database away; ``/readyz`` only once the database
answers and the events consumer has joined its group."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import httpx
import pytest

from db.settings import DatabaseSettings
from infra.processes import Deployed, free_port
from tests.fixtures.waits import wait_for


@pytest.mark.parametrize(("database", "ready"), [("answers", 200), ("away", 503)])
def test_the_agents_are_alive_at_once_and_ready_once_consuming(
    clean_db: DatabaseSettings, topic: str, tmp_path: Path, database: str, ready: int
) -> None:
    port = free_port()
    env = dict(
        os.environ,
        GAPLESS_EVENTS_TOPIC=topic,
        GAPLESS_AGENTS_APP_ID=f"probes-{uuid.uuid4().hex[:8]}",
        GAPLESS_AGENTS_WEB_PORT=str(port),
    )
    if database == "away":
        env["GAPLESS_PRODUCT_DSN"] = f"postgresql://nobody@127.0.0.1:{free_port()}/product"
    base = f"http://127.0.0.1:{port}"
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    agents = Deployed(
        "agents", ["agents"], env, tmp_path / "agents.log", base + "/healthz", cwd=workdir
    )
    agents.start()
    try:
        agents.wait_ready(timeout=60)  # /healthz: alive
        wait_for(lambda: _status(base + "/readyz") == ready, f"/readyz answering {ready}", 60)
        if ready == 503:
            assert agents.health() == 200
        assert agents.popen is not None
        agents.popen.send_signal(signal.SIGTERM)
        agents.popen.wait(timeout=60)
        # Faust's data directory is a private temporary one, never the working directory.
        assert list(workdir.iterdir()) == []
    finally:
        agents.kill()
        print(agents.tail())


def _status(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=3).status_code
    except httpx.HTTPError:
        return None
