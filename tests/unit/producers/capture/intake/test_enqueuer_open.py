"""The intake's job enqueuer made closed (as the resolver API assembles it): no
producer, no thread, no broker reached until it is opened."""

from __future__ import annotations

import threading

import pytest

from producers.capture.intake.enqueue import JobEnqueuer


def test_an_enqueuer_made_closed_reaches_no_broker_until_opened() -> None:
    before = {t.name for t in threading.enumerate()}
    enqueuer = JobEnqueuer("127.0.0.1:1", "jobs", 1.0, open=False)
    assert "intake-enqueue" not in {t.name for t in threading.enumerate()} - before
    with pytest.raises(RuntimeError, match="before open"):
        enqueuer.send([])
    enqueuer.close()  # never opened: nothing to flush or stop


def test_an_opened_enqueuer_polls_until_closed() -> None:
    enqueuer = JobEnqueuer("127.0.0.1:1", "jobs", 1.0, open=False)
    enqueuer.open()
    enqueuer.open()  # once
    assert "intake-enqueue" in {t.name for t in threading.enumerate()}
    enqueuer.close()
    assert "intake-enqueue" not in {t.name for t in threading.enumerate() if t.is_alive()}
