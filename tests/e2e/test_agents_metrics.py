"""The deployed agents' ``/metrics`` answers Prometheus' text format.

Found by the fault campaign (``gapless chaos``), which counts each agents worker's
work from it: the page answered 500 (aiohttp refuses a ``content_type`` naming a
charset, and Prometheus' content type names one).
"""

from __future__ import annotations

import os
import urllib.request
import uuid
from pathlib import Path

from infra.processes import Deployed, free_port


def test_agents_serve_their_metrics(tmp_path: Path) -> None:
    port = free_port()
    agents = Deployed(
        "agents",
        ["agents"],
        {
            **os.environ,
            "GAPLESS_AGENTS_WEB_PORT": str(port),
            "GAPLESS_AGENTS_APP_ID": f"metrics-{uuid.uuid4().hex[:8]}",
        },
        tmp_path / "agents.log",
        f"http://127.0.0.1:{port}/healthz",
    )
    agents.start()
    try:
        agents.wait_ready(120)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
            assert answer.status == 200
            assert answer.headers["Content-Type"].startswith("text/plain; version=")
            body = answer.read().decode()
        assert "# TYPE gapless_applier_events_total counter" in body, body[:2000]
    finally:
        agents.stop()
