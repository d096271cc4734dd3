"""Which offered rate the deployed phase reports as met."""

from __future__ import annotations

from infra.bench.deployed_latency import DeployedLatency, RateFigures


def _rate(offered: float, achieved: float, p99_ms: float) -> RateFigures:
    return RateFigures(
        offered=offered,
        achieved=achieved,
        events=1000,
        p50_ms=p99_ms / 3,
        p99_ms=p99_ms,
        max_ms=p99_ms * 1.5,
        relay_p50_ms=1.0,
        relay_p99_ms=p99_ms / 2,
        apply_p50_ms=1.0,
        apply_p99_ms=p99_ms / 2,
        cpu_us_per_event={},
        cores=1.0,
    )


def test_the_highest_rate_reached_within_the_p99_target_is_reported() -> None:
    figures = DeployedLatency([_rate(200, 200, 40), _rate(1000, 998, 90), _rate(2000, 1990, 150)])
    assert figures.max_rate == 1000


def test_a_rate_the_writers_fell_short_of_is_not_reported_however_low_its_p99() -> None:
    figures = DeployedLatency([_rate(200, 200, 40), _rate(1000, 784, 61), _rate(2000, 818, 80)])
    assert figures.max_rate == 200


def test_no_rate_within_the_target_reports_zero() -> None:
    assert DeployedLatency([_rate(200, 200, 140)]).max_rate == 0
