"""A process whose control database does not answer at start waits for it.

Found by the fault campaign (``gapless chaos``): a relay, capture worker or resolver
API started while PostgreSQL restarted exited at once (the first pause read
failed), so it stayed down until someone restarted it. The start now waits for the
database, never serving before it knows the pauses, and ends when stopped.
"""

from __future__ import annotations

import logging
import threading

import pytest

from db.control.pauses import PauseWatch
from infra.processes import free_port
from tests.fixtures.waits import wait_for


def test_start_waits_for_the_control_database_instead_of_failing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="db.control.pauses")
    nobody = f"postgresql://postgres@127.0.0.1:{free_port()}/control"
    watch = PauseWatch(nobody, "relay")
    outcome: list[object] = []

    def start() -> None:
        try:
            outcome.append(watch.start(retry_seconds=0.1))
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    wait_for(
        lambda: (
            outcome
            or any("waiting for the control database" in r.getMessage() for r in caplog.records)
        ),
        "the start to wait or to end",
        timeout=30,
    )
    assert not outcome, f"the start ended while the database was away: {outcome}"
    assert thread.is_alive()
    watch.stop()
    thread.join(10)
    assert outcome == [watch]
