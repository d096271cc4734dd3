"""The memory phase's figures (``gapless bench memory``) as JSON keys or a table."""

from __future__ import annotations

from dataclasses import dataclass

from infra.bench.machine import load_line

FLAT_WITHIN = 0.15
"""RSS at 100 % of the backlog at most this much above (or below) the RSS at 10 %: flat."""
MARKS = (10, 50, 100)
"""Percentages of the backlog at which the RSS is reported."""


@dataclass(frozen=True, slots=True)
class Sample:
    seconds: float
    """Since the process answered its health check."""
    done: int
    """Events of the backlog published (relay) or applied (agents) by then."""
    rss_mb: float


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    """One deployed process (and its children) over the backlog."""

    name: str
    events: int
    start_mb: float
    """When it answered its health check."""
    peak_mb: float
    """``VmHWM`` at the end, or the RSS at start if that was higher."""
    samples: list[Sample]

    def at(self, percent: int) -> Sample:
        """The first sample at or past ``percent`` % of the backlog."""
        target = self.events * percent / 100
        return next(s for s in self.samples if s.done >= target)

    @property
    def growth(self) -> float:
        """RSS at 100 % over RSS at 10 %, minus one."""
        first, last = self.at(10).rss_mb, self.at(100).rss_mb
        return last / first - 1 if first else 0.0

    @property
    def flat(self) -> bool:
        return abs(self.growth) <= FLAT_WITHIN

    @property
    def verdict(self) -> str:
        word = "flat" if self.flat else "not flat"
        return f"{word} ({self.growth:+.0%} from 10 % to 100 % of the backlog)"

    @property
    def seconds(self) -> float:
        return self.at(100).seconds

    def as_dict(self) -> dict[str, object]:
        p = self.name
        out: dict[str, object] = {
            f"{p}_peak_rss_mb": round(self.peak_mb, 1),
            f"{p}_rss_start_mb": round(self.start_mb, 1),
        }
        for mark in MARKS:
            out[f"{p}_rss_{mark}_mb"] = self.at(mark).rss_mb
        out[f"{p}_rss_growth"] = round(self.growth, 3)
        out[f"{p}_flat"] = self.flat
        out[f"{p}_seconds"] = self.seconds
        out[f"{p}_eps"] = round(self.events / self.seconds, 1) if self.seconds else 0.0
        out[f"{p}_samples"] = [[s.seconds, s.done, s.rss_mb] for s in self.samples]
        return out


def render_memory_table(
    events: int,
    seed_s: float,
    relay: ProcessMemory,
    agents: ProcessMemory,
    environment: dict[str, object],
) -> str:
    env = environment
    lines = [
        f"gapless bench memory: {events:,} events seeded in {seed_s:.0f} s, {env['cores']} cores,"
        f" PostgreSQL {env['postgres']}, {load_line(env)}",
        "",
        f"  {'RSS (MB)':<10} {'start':>8} {'10 %':>8} {'50 %':>8} {'100 %':>8} {'peak':>8}"
        f" {'seconds':>8}  verdict (flat: 100 % within {FLAT_WITHIN:.0%} of 10 %)",
    ]
    for p in (relay, agents):
        lines.append(
            f"  {p.name:<10} {p.start_mb:>8.0f} {p.at(10).rss_mb:>8.0f} {p.at(50).rss_mb:>8.0f}"
            f" {p.at(100).rss_mb:>8.0f} {p.peak_mb:>8.0f} {p.seconds:>8.1f}  {p.verdict}"
        )
    return "\n".join(lines)
