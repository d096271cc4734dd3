"""The resolver client's bounded calls: which answers are retried, how often, how
long it pauses, and how many calls it lets run at once (no network: httpx's mock
transport answers; the real API is exercised in tests/integration/processors)."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from processors.exceptions import ResolverUnavailable
from processors.resolver_client import ResolverClient, RetryPolicy

STREAM = ("t1", "c1", 1)
OK = httpx.Response(200, json={"reported_position": 7})


def client(
    handler: Callable[[httpx.Request], httpx.Response],
    pauses: list[float],
    attempts: int = 4,
    concurrency: int = 4,
) -> ResolverClient:
    return ResolverClient(
        "http://resolver.test",
        "token",
        retry=RetryPolicy(max_attempts=attempts, base_seconds=0.1, cap_seconds=0.3),
        max_concurrency=concurrency,
        transport=httpx.MockTransport(handler),
        sleep=pauses.append,
    )


def answers(*responses: httpx.Response | Exception) -> Callable[[httpx.Request], httpx.Response]:
    queue = list(responses)

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == "Bearer token"
        answer = queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return handler


def test_no_answer_a_5xx_and_a_429_are_tried_again_until_one_succeeds() -> None:
    pauses: list[float] = []
    down = httpx.ConnectError("connection refused")
    c = client(answers(down, httpx.Response(503), httpx.Response(429), OK), pauses)
    assert c.report_progress(STREAM, "app", 7) == 7
    assert len(pauses) == 3
    assert all(0 <= p <= bound for p, bound in zip(pauses, (0.1, 0.2, 0.3), strict=True))


def test_a_call_that_runs_out_of_attempts_is_unavailable_naming_the_last_problem() -> None:
    pauses: list[float] = []
    c = client(answers(*[httpx.Response(502)] * 3), pauses, attempts=3)
    with pytest.raises(ResolverUnavailable, match=r"HTTP 502 \(3 attempts\)"):
        c.report_progress(STREAM, "app", 7)
    assert len(pauses) == 2


def test_an_answer_retrying_cannot_change_is_not_retried() -> None:
    pauses: list[float] = []
    c = client(answers(httpx.Response(422, json={"code": "VALIDATION_FAILED"})), pauses)
    with pytest.raises(httpx.HTTPStatusError):
        c.report_progress(STREAM, "app", 7)
    assert pauses == []


@given(st.integers(min_value=1, max_value=30), st.integers(min_value=0, max_value=2**32))
def test_pauses_are_jittered_below_the_doubling_bound_and_the_cap(failed: int, seed: int) -> None:
    policy = RetryPolicy(max_attempts=5, base_seconds=0.25, cap_seconds=4.0)
    pause = policy.pause(failed, random.Random(seed))
    assert 0 <= pause <= min(4.0, 0.25 * 2 ** (failed - 1))


def test_no_more_calls_are_in_flight_than_the_concurrency_allows() -> None:
    in_flight = peak = 0
    lock = threading.Lock()
    two_in = threading.Event()

    def slow(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
            if in_flight == 2:
                two_in.set()
        # The first call holds its slot until a second one is in flight too.
        assert two_in.wait(timeout=10)
        with lock:
            in_flight -= 1
        return httpx.Response(200, json={"reported_position": 1})

    c = client(slow, [], concurrency=2)
    threads = [
        threading.Thread(target=c.report_progress, args=(STREAM, "app", 1)) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak == 2
