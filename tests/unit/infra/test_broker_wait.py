"""The agents' start waits for the broker (a Faust worker exits when none answers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.broker_wait import wait_for_broker


def test_it_waits_until_the_broker_answers() -> None:
    answers = iter([False, False, False, True])
    probed: list[Mapping[str, Any]] = []

    def answer(config: Mapping[str, Any]) -> bool:
        probed.append(config)
        return next(answers)

    config = {"bootstrap.servers": "127.0.0.1:1"}
    assert wait_for_broker(config, answer, pause_s=0.0) == 3
    assert probed == [config] * 4


def test_a_broker_that_answers_costs_one_probe() -> None:
    assert wait_for_broker({}, lambda _config: True, pause_s=0.0) == 0
