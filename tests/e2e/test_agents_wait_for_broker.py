"""``gapless agents`` started while no broker answers waits for one instead of exiting.

Found by the fault campaign (``gapless chaos``): an agents worker restarted during a
broker restart exited at once (Faust's "Unable to bootstrap"), and stayed down.
"""

from __future__ import annotations

import os
from pathlib import Path

from infra.processes import Deployed, free_port
from tests.fixtures.waits import wait_for


def test_agents_wait_for_the_broker(tmp_path: Path) -> None:
    nobody = f"127.0.0.1:{free_port()}"
    log = tmp_path / "agents.log"
    agents = Deployed(
        "agents",
        ["agents"],
        {
            **os.environ,
            "GAPLESS_KAFKA_BOOTSTRAP": nobody,
            "GAPLESS_AGENTS_WEB_PORT": str(free_port()),
        },
        log,
    )
    agents.start()
    try:
        wait_for(
            lambda: not agents.alive() or "no broker answers" in log.read_text(errors="replace"),
            "the agents to wait for the broker (or to exit)",
            timeout=60,
        )
        assert agents.alive(), agents.tail()
    finally:
        agents.stop()
