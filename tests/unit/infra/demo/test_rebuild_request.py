"""The demo's (and the fault campaign's) rebuild request, asked again after a send
that reported a failure, sends the same command: one rebuild id, whichever of the
sends reached the agents."""

from __future__ import annotations

from typing import Any

import pytest

from db.settings import DatabaseSettings
from infra.demo import rebuild as demo_rebuild
from schemas.control import ControlCommand


def test_a_request_asked_again_after_a_failed_send_sends_the_same_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[ControlCommand] = []

    def publish(_config: Any, command: ControlCommand, _topic: str) -> None:
        sent.append(command)
        if len(sent) == 1:
            raise TimeoutError("the broker did not confirm it (it may still deliver it)")

    monkeypatch.setattr(demo_rebuild, "publish", publish)
    rebuild = demo_rebuild.DemoRebuild(DatabaseSettings(), ("t1", "c1"), lambda _m: None)
    with pytest.raises(TimeoutError):
        rebuild.request()
    assert rebuild.rebuild_id is None
    rebuild.requested = False  # what the campaign's retry loop does
    rebuild.request()
    assert len(sent) == 2
    assert sent[0].command_id == sent[1].command_id == rebuild.rebuild_id
    rebuild.request()  # asked once: nothing more is sent
    assert len(sent) == 2
