"""``processors.live_first``: background work waits for the live batches in flight,
and never longer than its cap (threads, no services)."""

from __future__ import annotations

import sys
import threading

from processors.live_first import NO_LIVE_WORK, SWITCH_INTERVAL_S, LiveFirst


def test_with_no_live_batch_in_flight_nothing_waits() -> None:
    gate = LiveFirst(max_wait_s=5.0)
    assert gate.yield_to_live() < 1.0
    assert NO_LIVE_WORK.yield_to_live() < 1.0


def test_background_work_waits_until_the_live_batch_ends() -> None:
    gate = LiveFirst(max_wait_s=30.0)
    started, release = threading.Event(), threading.Event()
    finished: list[float] = []

    def batch() -> None:
        with gate.live():
            started.set()
            release.wait(30)

    def background() -> None:
        finished.append(gate.yield_to_live())

    live = threading.Thread(target=batch)
    live.start()
    assert started.wait(30)
    waiting = threading.Thread(target=background)
    waiting.start()
    waiting.join(0.2)
    assert waiting.is_alive() and gate.in_flight == 1  # held back while the batch runs
    release.set()
    waiting.join(30)
    live.join(30)
    assert not waiting.is_alive() and finished and finished[0] >= 0.2
    assert gate.in_flight == 0


def test_a_live_stream_with_no_gap_never_starves_the_background() -> None:
    gate = LiveFirst(max_wait_s=0.05)
    with gate.live():
        waited = gate.yield_to_live()
    assert 0.05 <= waited < 5.0
    assert gate.waited_s >= waited


def test_a_batch_that_raises_still_counts_out() -> None:
    gate = LiveFirst()
    try:
        with gate.live():
            raise RuntimeError("bad batch")
    except RuntimeError:
        pass
    assert gate.in_flight == 0


def test_the_short_switch_interval_holds_only_while_background_work_runs() -> None:
    gate = LiveFirst()
    before = sys.getswitchinterval()
    with gate.background():
        assert sys.getswitchinterval() == SWITCH_INTERVAL_S
        with gate.background():  # nested: still short
            assert sys.getswitchinterval() == SWITCH_INTERVAL_S
        assert sys.getswitchinterval() == SWITCH_INTERVAL_S
    assert sys.getswitchinterval() == before
    try:
        with gate.background():
            raise RuntimeError("step failed")
    except RuntimeError:
        pass
    assert sys.getswitchinterval() == before
