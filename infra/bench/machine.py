"""What the machine was doing while a benchmark ran, so that two runs can be compared.

Ratios within one run are what the bench compares; absolute figures differ between
machines of one kind (about twice, on the 2-core virtual machines these runs come
from) and between two runs on one machine. Three figures say which it was:

* the load averages at the start and at the end;
* the share of CPU time over the run that was busy (user, system, interrupts) and
  the share the hypervisor took for others (``steal``), from ``/proc/stat``: a run
  with steal in it measured a slower machine than its cores suggest;
* ``codec_reference_us``: one envelope encoded and decoded by the event codec on one
  thread, before the run (the median of a few rounds), a figure of the machine's
  single-thread speed on the code the hot paths spend most in.

On a system without ``/proc/stat`` the CPU shares are None.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from schemas.codec import CODEC
from schemas.events import AggregateRef, CatalogItemUpserted, Envelope

PROC_STAT = Path("/proc/stat")
REFERENCE_ROUNDS = 5
REFERENCE_ENVELOPES = 2000


@dataclass(frozen=True, slots=True)
class CpuTicks:
    """The whole machine's CPU time since boot, in clock ticks (all cores)."""

    busy: int
    steal: int
    total: int


def parse_cpu_line(line: str) -> CpuTicks:
    """The ``cpu`` line of ``/proc/stat``: user nice system idle iowait irq softirq
    steal guest guest_nice (guest time is already inside user and nice)."""
    name, *values = line.split()
    if name != "cpu" or len(values) < 8:
        raise ValueError(f"not the cpu line of /proc/stat: {line!r}")
    user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in values[:8])
    busy = user + nice + system + irq + softirq
    return CpuTicks(busy=busy, steal=steal, total=busy + idle + iowait + steal)


def cpu_ticks(stat: Path = PROC_STAT) -> CpuTicks | None:
    """The machine's CPU ticks now; None where ``/proc/stat`` cannot be read."""
    try:
        with stat.open() as lines:
            return parse_cpu_line(lines.readline())
    except (OSError, ValueError):
        return None


def shares(start: CpuTicks | None, end: CpuTicks | None) -> tuple[float | None, float | None]:
    """Busy and stolen percent of the CPU time between two samples."""
    if start is None or end is None or end.total <= start.total:
        return None, None
    total = end.total - start.total
    return (
        round(100 * (end.busy - start.busy) / total, 1),
        round(100 * (end.steal - start.steal) / total, 1),
    )


def codec_reference_us() -> float:
    """Microseconds to encode and decode one item envelope on this thread."""
    envelope = Envelope(
        tenant_id="reference-tenant",
        catalog_id="catalog1",
        history_epoch=1,
        position=1,
        event_id=uuid.uuid4(),
        aggregate=AggregateRef(type="catalog_item", id="item-1", revision=1),
        occurred_at=datetime.now(UTC),
        payload=CatalogItemUpserted(
            class_id="shoe",
            status="active",
            title="Trail shoe item-1",
            attributes={"colour": "blue", "size": "42"},
        ),
    )
    rounds = []
    for _ in range(REFERENCE_ROUNDS):
        start = time.perf_counter()
        for _ in range(REFERENCE_ENVELOPES):
            CODEC.decode_value(CODEC.encode_value(envelope))
        rounds.append((time.perf_counter() - start) / REFERENCE_ENVELOPES)
    return round(statistics.median(rounds) * 1e6, 2)


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class MachineLoad:
    """Started before a run (it measures the reference then), finished after it."""

    def __init__(self) -> None:
        self._loadavg_start = _loadavg()
        self._reference_us = codec_reference_us()
        self._ticks_start = cpu_ticks()

    def finish(self) -> dict[str, object]:
        """The figures, under the keys every bench's JSON reports them with."""
        busy, steal = shares(self._ticks_start, cpu_ticks())
        return {
            "loadavg_start": self._loadavg_start,
            "loadavg_end": _loadavg(),
            "cpu_busy_pct": busy,
            "cpu_steal_pct": steal,
            "codec_reference_us": self._reference_us,
        }


def load_line(env: dict[str, object]) -> str:
    """The load, the CPU shares and the reference, as a report prints them."""
    return (
        f"load average {env.get('loadavg_start')} at the start, {env.get('loadavg_end')}"
        f" at the end; CPU {env.get('cpu_busy_pct')}% busy, {env.get('cpu_steal_pct')}%"
        f" stolen; codec reference {env.get('codec_reference_us')} µs"
    )
