"""The agents' start waits for the broker (a Faust worker exits when none answers)."""

from __future__ import annotations

import concurrent.futures

import pytest
from aiokafka import errors  # type: ignore[import-untyped]

from infra.broker_wait import lost_broker_at_start, wait_for_broker
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


class _Worker:
    """What ``lost_broker_at_start`` reads of a Faust worker: its starting future."""

    def __init__(self, failure: BaseException | None, done: bool = True) -> None:
        self._starting_fut: concurrent.futures.Future[None] = concurrent.futures.Future()
        if done and failure is not None:
            self._starting_fut.set_exception(failure)
        elif done:
            self._starting_fut.set_result(None)


@pytest.mark.parametrize(
    "failure",
    [
        errors.KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 1)]"),
        errors.NodeNotReadyError("Attempt to send a request to node which is not ready"),
        errors.NotControllerError(),
        errors.LeaderNotAvailableError(),
        errors.RequestTimedOutError(),
        errors.KafkaTimeoutError(),
    ],
)
def test_a_broker_or_node_lost_during_the_start_means_start_again(failure: Exception) -> None:
    assert lost_broker_at_start(_Worker(failure))


@pytest.mark.parametrize(
    "failure",
    [ValueError("a bug"), errors.TopicAuthorizationFailedError(), errors.UnsupportedVersionError()],
)
def test_any_other_failure_is_not_retried(failure: Exception) -> None:
    assert not lost_broker_at_start(_Worker(failure))


def test_a_start_that_did_not_fail_is_not_retried() -> None:
    assert not lost_broker_at_start(_Worker(None))
    assert not lost_broker_at_start(_Worker(None, done=False))
    assert not lost_broker_at_start(object())
