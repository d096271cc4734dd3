"""Waiting for the broker before a process that cannot start without it.

Faust's worker gives up at start-up when no broker answers ("Unable to bootstrap")
and the process exits; a broker restart that happens to coincide with an agents
worker's start (a deploy, a crash and its restart) would then leave the agents down
until someone restarts them. ``wait_for_broker`` holds the start until the broker
answers a metadata request, however long that takes (the process is not ready
meanwhile, and SIGTERM still ends it), logging while it waits. The broker can
still go between that answer and Faust's own connection, and on a cluster a node can
die while Faust starts: ``lost_broker_at_start`` tells those failures from any other,
so the command starts again instead of exiting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from schemas.settings import KafkaSettings

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 5.0
LOG_EVERY_S = 10.0


def broker_answers(settings: KafkaSettings) -> bool:
    """Whether a broker of ``settings`` answers a metadata request now."""
    admin = AdminClient(settings.client_config())
    try:
        admin.list_topics(timeout=PROBE_TIMEOUT_S)
    except KafkaException:
        return False
    return True


def lost_broker_at_start(worker: Any) -> bool:
    """Whether a Faust worker's start failed because a broker it needed did not
    answer: no broker at all (``aiokafka``'s ``KafkaConnectionError``, "Unable to
    bootstrap"), or, on a cluster, a node its metadata still names that has just died
    (``NodeNotReadyError`` while Faust declares its topics), a controller or leader
    moving (``NotControllerError``, ``LeaderNotAvailableError``) or a request timed
    out: every error aiokafka marks retriable, and its metadata wait timing out."""
    from aiokafka.errors import KafkaError, KafkaTimeoutError  # type: ignore[import-untyped]

    starting = getattr(worker, "_starting_fut", None)
    if starting is None or not starting.done() or starting.cancelled():
        return False
    failure = starting.exception()
    if isinstance(failure, KafkaTimeoutError):
        return True
    return isinstance(failure, KafkaError) and bool(getattr(failure, "retriable", False))


def wait_for_broker(
    settings: KafkaSettings,
    answers: Callable[[KafkaSettings], bool] = broker_answers,
    pause_s: float = 1.0,
) -> int:
    """Until the broker answers; how many probes failed first."""
    failed = 0
    logged = 0.0
    while not answers(settings):
        failed += 1
        now = time.monotonic()
        if now - logged >= LOG_EVERY_S:
            logged = now
            log.warning(
                "no broker answers at %s yet; waiting before starting (%d probes failed)",
                settings.client_config().get("bootstrap.servers"),
                failed,
            )
        time.sleep(pause_s)
    if failed:
        log.info("the broker answers after %d failed probes; starting", failed)
    return failed
