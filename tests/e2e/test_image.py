"""The image, run as users deploy it: the resolver API, the relay, the product agents
and the capture worker as containers of it (``podman run --network host``) against
the local services, through the demo's workload and its crashes (the worker, the
relay and the agents each killed with SIGKILL once midway, then started again as new
containers), ending with the demo's row-by-row check of the projections.

Stopped with SIGTERM (``podman stop``), each process, PID 1 in its container, drains
and exits 0 within the grace period. ``make image-test`` runs this, and so does
``make test``: the image is built, or reused when nothing changed, and a host where
podman cannot build or run it fails the test, never skips it.
"""

from __future__ import annotations

import json
import sys
import uuid

import pytest

from db.settings import DatabaseSettings
from infra.demo.run import run_demo
from infra.image.build import build
from infra.image.containers import Contained, launcher
from infra.local import ServiceError
from infra.local.layout import current_layout
from infra.processes import free_port

KILLED = ("relay", "agents", "resolver-worker")
"""The demo's chaos kills each of these once, then starts it again."""


@pytest.fixture(scope="module")
def image() -> str:
    try:
        return build(current_layout(), lambda line: print(line, file=sys.stderr))
    except ServiceError as exc:
        pytest.fail(f"the image could not be built or podman cannot run here:\n{exc}")


@pytest.mark.slow
def test_the_demo_converges_through_the_image_with_containers_killed(
    clean_db: DatabaseSettings,
    topic: str,
    image: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    api_port = free_port()
    monkeypatch.setenv("GAPLESS_EVENTS_TOPIC", topic)
    monkeypatch.setenv("GAPLESS_AGENTS_APP_ID", f"image-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("GAPLESS_AGENTS_WEB_PORT", str(free_port()))
    monkeypatch.setenv("GAPLESS_RESOLVER_API_PORT", str(api_port))
    monkeypatch.setenv("GAPLESS_RESOLVER_URL", f"http://127.0.0.1:{api_port}")
    started: list[Contained] = []
    ok = run_demo(
        events=400,
        tenants=2,
        writers=4,
        keep_running=True,
        as_json=True,
        echo=lambda line: print(line, file=sys.stderr),
        chaos=True,
        launch=launcher(image, current_layout(), started),
    )
    lines = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(next(line for line in lines if line.startswith("{")))
    logs = "\n".join(p.tail() for p in started)
    assert ok, f"{lines[-1]}\n{logs}"
    assert summary["failed_checks"] == []
    assert summary["mismatched_rows"] == 0
    assert summary["events_committed"] == (
        summary["events_applied"] + summary["ignored_stale"] + summary["loaded_by_rebuild"]
    )
    assert summary["captures_settled"] is True
    assert summary["rebuild"]["phase"] == "done"

    by_name = {p.name: p for p in started}
    assert set(by_name) == {"resolver-api", "relay", "agents", "resolver-worker"}
    # Every process was a container of the image, and each killed one was a crash
    # (137: SIGKILL) followed by a new container that drained on SIGTERM (0).
    for name, process in by_name.items():
        expected = [137, 0] if name in KILLED else [0]
        assert process.exit_codes == expected, f"{name}: {process.exit_codes}\n{logs}"
    assert "relay stopped" in by_name["relay"].output()
    assert "resolver-worker stopped" in by_name["resolver-worker"].output()
