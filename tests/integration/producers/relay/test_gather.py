"""A relay woken by NOTIFY starts its next pass no sooner than ``gather_seconds`` after
the previous one began, and the commits of that interval share one pass."""

from __future__ import annotations

import threading
import time

from db.settings import DatabaseSettings
from producers.relay.publisher import Publisher
from producers.relay.relay import Relay
from schemas.settings import KafkaSettings
from tests.integration.producers.relay.test_relay import _outbox_count, _write

GATHER_S = 1.0
"""Long beside three one-item writes (milliseconds each), so they all land in it."""
DEADLINE_S = 30.0


class Passes:
    """The relay's passes: when each began (monotonic) and how many rows it published."""

    def __init__(self, relay: Relay) -> None:
        self.log: list[tuple[float, int]] = []
        self._changed = threading.Condition()
        run_once = relay.run_once

        def counted() -> int:
            began = time.monotonic()
            published = run_once()
            with self._changed:
                self.log.append((began, published))
                self._changed.notify_all()
            return published

        relay.run_once = counted  # type: ignore[method-assign]

    def wait_for(self, rows: int) -> None:
        """Until a pass has run and the passes have published ``rows`` in all."""
        with self._changed:
            if not self._changed.wait_for(
                lambda: bool(self.log) and sum(n for _, n in self.log) >= rows,
                timeout=DEADLINE_S,
            ):
                raise AssertionError(f"published {sum(n for _, n in self.log)} of {rows}")


def test_commits_within_the_gather_share_one_pass_begun_no_sooner(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, topic: str
) -> None:
    relay = Relay(
        clean_db.resolver_dsn,
        Publisher(kafka_settings.kafka_bootstrap, topic),
        poll_seconds=60.0,  # only NOTIFY wakes it here
        gather_seconds=GATHER_S,
    )
    passes = Passes(relay)
    stop = threading.Event()
    worker = threading.Thread(target=relay.run, args=(stop,), daemon=True)
    worker.start()
    try:
        passes.wait_for(0)  # the first pass, at start: nothing to publish
        _write(clean_db, 1)
        first = _outbox_count(clean_db)
        passes.wait_for(first)
        woke_at = len(passes.log)
        _write(clean_db, 3, first=1)  # three commits, three NOTIFYs
        total = _outbox_count(clean_db)
        passes.wait_for(total)
    finally:
        stop.set()
        worker.join(timeout=DEADLINE_S)
    publishing = [k for k in range(woke_at, len(passes.log)) if passes.log[k][1]]
    assert len(publishing) == 1, passes.log  # one pass for the three commits
    (k,) = publishing
    assert passes.log[k][1] == total - first
    assert passes.log[k][0] - passes.log[k - 1][0] >= GATHER_S
