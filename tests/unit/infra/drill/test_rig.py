"""The drill's rig stops every process it started, also when its writers failed."""

from __future__ import annotations

from typing import Any, cast

import pytest

from infra.drill.rig import Rig


class _Stoppable:
    def __init__(self, stopped: list[str], name: str, fails: bool = False) -> None:
        self.stopped, self.name, self.fails = stopped, name, fails

    def stop(self) -> None:
        self.stopped.append(self.name)
        if self.fails:
            raise RuntimeError("the drill's writers failed")


def _rig(stopped: list[str], writers_fail: bool) -> Rig:
    none = cast(Any, None)
    processes = {n: _Stoppable(stopped, n) for n in ("api", "relay", "agents")}
    return Rig(
        box=none,
        tenant="t",
        old=none,
        api_port=1,
        read_port=2,
        token="x",
        kafka=none,
        processes=cast(Any, processes),
        health={},
        workers=[],
        writers=cast(Any, _Stoppable(stopped, "writers", fails=writers_fail)),
    )


def test_a_writers_failure_is_raised_after_every_process_is_stopped() -> None:
    stopped: list[str] = []
    rig = _rig(stopped, writers_fail=True)
    with pytest.raises(RuntimeError, match="writers failed"):
        rig.stop()
    assert stopped == ["writers", "agents", "relay", "api"]


def test_writers_that_failed_when_stopped_are_not_stopped_again() -> None:
    stopped: list[str] = []
    rig = _rig(stopped, writers_fail=True)
    with pytest.raises(RuntimeError):
        rig.stop_writers()
    rig.stop()
    assert stopped == ["writers", "agents", "relay", "api"]
