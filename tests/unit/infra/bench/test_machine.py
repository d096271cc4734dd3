"""The machine's load around a bench run: /proc/stat's cpu line and the shares."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.bench.machine import CpuTicks, cpu_ticks, load_line, parse_cpu_line, shares


def test_the_cpu_line_splits_into_busy_stolen_and_total_ticks() -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    ticks = parse_cpu_line("cpu  100 5 40 800 20 3 2 30 7 0\n")
    assert ticks == CpuTicks(busy=100 + 5 + 40 + 3 + 2, steal=30, total=150 + 800 + 20 + 30)


def test_a_line_that_is_not_the_cpu_total_is_refused() -> None:
    with pytest.raises(ValueError, match="cpu line"):
        parse_cpu_line("cpu0 1 2 3 4 5 6 7 8")
    with pytest.raises(ValueError, match="cpu line"):
        parse_cpu_line("cpu 1 2 3")


def test_shares_are_percent_of_the_ticks_between_two_samples() -> None:
    start = CpuTicks(busy=1000, steal=10, total=5000)
    end = CpuTicks(busy=1600, steal=60, total=6000)
    assert shares(start, end) == (60.0, 5.0)


def test_no_shares_without_two_samples_or_without_time_between_them() -> None:
    sample = CpuTicks(busy=1, steal=0, total=10)
    assert shares(None, sample) == (None, None)
    assert shares(sample, None) == (None, None)
    assert shares(sample, sample) == (None, None)


def test_an_unreadable_proc_stat_gives_no_sample(tmp_path: Path) -> None:
    assert cpu_ticks(tmp_path / "absent") is None
    garbled = tmp_path / "stat"
    garbled.write_text("intr 1 2 3\n")
    assert cpu_ticks(garbled) is None


def test_the_report_line_names_every_figure() -> None:
    line = load_line(
        {
            "loadavg_start": [0.5, 0.4, 0.3],
            "loadavg_end": [1.5, 1.0, 0.6],
            "cpu_busy_pct": 72.5,
            "cpu_steal_pct": 1.2,
            "codec_reference_us": 17.4,
        }
    )
    assert "[0.5, 0.4, 0.3] at the start" in line and "[1.5, 1.0, 0.6] at the end" in line
    assert "72.5% busy" in line and "1.2% stolen" in line and "17.4 µs" in line
