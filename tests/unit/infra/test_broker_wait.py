"""The agents' start waits for the broker (a Faust worker exits when none answers)."""

from __future__ import annotations

from infra.broker_wait import wait_for_broker
from schemas.settings import KafkaSettings


def test_it_waits_until_the_broker_answers() -> None:
    answers = iter([False, False, False, True])
    probed: list[KafkaSettings] = []

    def answer(settings: KafkaSettings) -> bool:
        probed.append(settings)
        return next(answers)

    settings = KafkaSettings(kafka_bootstrap="127.0.0.1:1")
    assert wait_for_broker(settings, answer, pause_s=0.0) == 3
    assert probed == [settings] * 4


def test_a_broker_that_answers_costs_one_probe() -> None:
    assert wait_for_broker(KafkaSettings(), lambda _settings: True, pause_s=0.0) == 0
