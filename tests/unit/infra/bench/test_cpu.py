"""Attributing CPU to the deployed path's processes: each counted once."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from infra.bench.cpu import CpuMeter, DatabaseCpu, exclusive_trees

BURN_S = 0.3
DEADLINE_S = 30.0


def test_a_named_process_started_by_another_counts_for_itself_only() -> None:
    roots = {"writers": 100, "relay": 200, "agents": 300, "postgres": 900}
    trees = {
        "writers": [100, 200, 201, 300, 301, 302],  # the bench started relay and agents
        "relay": [200, 201],
        "agents": [300, 301, 302],
        "postgres": [900, 901, 902],
    }
    assert exclusive_trees(roots, trees) == {
        "writers": [100],
        "relay": [200, 201],
        "agents": [300, 301, 302],
        "postgres": [900, 901, 902],
    }


def test_unrelated_processes_keep_their_whole_trees() -> None:
    roots = {"a": 1, "b": 2}
    trees = {"a": [1, 10, 11], "b": [2, 20]}
    assert exclusive_trees(roots, trees) == trees


def test_the_cpu_of_a_child_it_names_is_not_counted_in_this_process() -> None:
    burn = (
        "import time\n"
        "t = time.process_time()\n"
        f"while time.process_time() - t < {BURN_S}:\n"
        "    pass\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", burn])
    try:
        meter = CpuMeter({"this": os.getpid(), "child": child.pid})
        before = meter.sample()
        deadline = time.monotonic() + DEADLINE_S
        while (now := meter.sample())["child"] - before["child"] < BURN_S * 0.9:
            assert time.monotonic() < deadline, "the child never burnt its CPU"
            time.sleep(0.05)
        assert now["this"] - before["this"] < BURN_S / 2
    finally:
        child.kill()
        child.wait()


def test_per_event_microseconds_are_the_difference_over_the_events() -> None:
    per = CpuMeter.per_event_us(
        {"writers": 1.0, "relay": 0.5}, {"writers": 1.5, "relay": 0.6}, 1000
    )
    assert per == pytest.approx({"writers": 500.0, "relay": 100.0})
    assert CpuMeter.per_event_us({"writers": 1.0}, {"writers": 2.0}, 0) == {}


def test_each_databases_backends_count_only_while_alive_at_both_samples() -> None:
    before = {10: ("resolver", 1.0), 11: ("resolver", 2.0), 20: ("product", 5.0), 30: ("x", 1.0)}
    after = {10: ("resolver", 1.5), 11: ("resolver", 2.25), 20: ("product", 5.5), 40: ("x", 9.0)}
    # 30 ended and 40 began between the samples: neither is counted.
    assert DatabaseCpu.per_event_us(before, after, 1000) == {"resolver": 750.0, "product": 500.0}
    assert DatabaseCpu.per_event_us(before, after, 0) == {}
