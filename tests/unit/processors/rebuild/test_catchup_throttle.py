"""The catch-up throttle's arithmetic: page sizes and waits (pure)."""

from __future__ import annotations

import pytest

from processors.rebuild.catchup import SLICE_SECONDS, UNTHROTTLED, Throttle


def test_unthrottled_keeps_the_page_and_never_waits() -> None:
    assert UNTHROTTLED.page(2000) == 2000
    assert UNTHROTTLED.wait(1_000_000, 0.0) == 0.0


def test_a_throttled_page_holds_one_slice_of_the_rate() -> None:
    assert Throttle(500).page(2000) == round(500 * SLICE_SECONDS) == 250
    assert Throttle(1_000_000).page(2000) == 2000  # never above the configured page
    assert Throttle(1).page(2000) == 1  # at least one event a page
    assert Throttle(0.5).page(2000) == 1


def test_the_wait_keeps_the_round_at_the_rate() -> None:
    throttle = Throttle(500)
    assert throttle.wait(250, 0.02) == pytest.approx(0.48)  # 250 events: 0.5 s of 500/s
    assert throttle.wait(1000, 1.5) == pytest.approx(0.5)
    assert throttle.wait(1000, 2.0) == 0.0  # on time
    assert throttle.wait(1000, 5.0) == 0.0  # behind: no wait, and no burst either, as
    assert throttle.page(2000) == 250  # pages stay one slice long


def test_paced_pages_apply_at_the_rate() -> None:
    """Pages applied back to back, each followed by its wait, take fetched / rate."""
    throttle = Throttle(400)
    clock = applied = 0.0
    page = throttle.page(2000)
    for _ in range(100):
        applied += page
        clock += 0.01  # each page takes 10 ms to apply
        clock += throttle.wait(int(applied), clock)
    assert clock == pytest.approx(applied / 400)
