"""The intake's job enqueuer made closed (as the resolver API assembles it): no
producer, no thread, no broker reached until it is opened."""

from __future__ import annotations

import threading

import pytest

from producers.capture.intake.enqueue import JobEnqueuer


def pollers() -> set[threading.Thread]:
    """Every enqueuer's poller thread alive now (other tests may have left some)."""
    return {t for t in threading.enumerate() if t.name == "intake-enqueue" and t.is_alive()}


def test_an_enqueuer_made_closed_reaches_no_broker_until_opened() -> None:
    before = pollers()
    enqueuer = JobEnqueuer("127.0.0.1:1", "jobs", 1.0, open=False)
    assert pollers() - before == set()
    with pytest.raises(RuntimeError, match="before open"):
        enqueuer.send([])
    enqueuer.close()  # never opened: nothing to flush or stop


def test_an_opened_enqueuer_polls_until_closed() -> None:
    before = pollers()
    enqueuer = JobEnqueuer("127.0.0.1:1", "jobs", 1.0, open=False)
    enqueuer.open()
    enqueuer.open()  # once
    started = pollers() - before
    assert len(started) == 1
    enqueuer.close()
    assert not any(t.is_alive() for t in started)
