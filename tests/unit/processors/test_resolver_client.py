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

from processors.exceptions import (
    RebuildRequired,
    ResolverForgot,
    ResolverHistoryBehind,
    ResolverRefused,
    ResolverUnavailable,
    RetainedEventsGone,
)
from processors.resolver_client import ResolverClient, RetryPolicy, refusal

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
    with pytest.raises(ResolverRefused) as refused:
        c.report_progress(STREAM, "app", 7)
    assert (refused.value.resolver_code, refused.value.status) == ("VALIDATION_FAILED", 422)
    assert pauses == []


def _answer(status: int, code: str | None = None, message: str = "why") -> httpx.Response:
    body = {"code": code, "message": message} if code else {"detail": message}
    return httpx.Response(status, json=body)


@pytest.mark.parametrize(
    ("answer", "kind", "resolver_code"),
    [
        (_answer(410, "CURSOR_PRUNED"), RetainedEventsGone, "CURSOR_PRUNED"),
        (_answer(410, "LEASE_EXPIRED"), RetainedEventsGone, "LEASE_EXPIRED"),
        (_answer(404, "LEASE_NOT_FOUND"), ResolverForgot, "LEASE_NOT_FOUND"),
        (_answer(404, "EXPORT_NOT_FOUND"), ResolverForgot, "EXPORT_NOT_FOUND"),
        (_answer(404, "STREAM_NOT_FOUND"), ResolverRefused, "STREAM_NOT_FOUND"),
        (_answer(404, "NOT_FOUND"), ResolverRefused, "NOT_FOUND"),
        (_answer(409, "CONSUMER_NEEDS_REBUILD"), RebuildRequired, "CONSUMER_NEEDS_REBUILD"),
        (
            _answer(409, "POSITION_BEYOND_COMMITTED"),
            ResolverHistoryBehind,
            "POSITION_BEYOND_COMMITTED",
        ),
        (_answer(409, "LEASE_EPOCH_MISMATCH"), ResolverRefused, "LEASE_EPOCH_MISMATCH"),
        (_answer(403, "TENANT_SCOPE_DENIED"), ResolverRefused, "TENANT_SCOPE_DENIED"),
        (_answer(422), ResolverRefused, "HTTP_422"),
        (httpx.Response(400, text="not json"), ResolverRefused, "HTTP_400"),
    ],
)
def test_every_refusal_maps_to_one_typed_error_with_the_resolvers_code(
    answer: httpx.Response, kind: type[ResolverRefused], resolver_code: str
) -> None:
    error = refusal(answer)
    assert type(error) is kind and isinstance(error, ResolverRefused)
    assert (error.resolver_code, error.status) == (resolver_code, answer.status_code)
    assert error.message in ("why", "not json")


def test_a_5xx_or_a_429_is_unavailable_not_a_refusal() -> None:
    assert type(refusal(_answer(503, "UNAVAILABLE"))) is ResolverUnavailable
    assert type(refusal(httpx.Response(502, text=""))) is ResolverUnavailable
    assert type(refusal(_answer(429, "TOO_MANY"))) is ResolverUnavailable


def test_each_refusal_kind_has_its_own_code_and_pickles_whole() -> None:
    import pickle

    kinds = [ResolverRefused, RetainedEventsGone, ResolverForgot]
    kinds += [RebuildRequired, ResolverHistoryBehind]
    assert len({k.code for k in kinds} | {ResolverUnavailable.code}) == len(kinds) + 1
    error = ResolverHistoryBehind("POSITION_BEYOND_COMMITTED", 409, "4 > 2")
    back = pickle.loads(pickle.dumps(error))
    assert (type(back), back.resolver_code, back.status, back.message) == (
        ResolverHistoryBehind,
        "POSITION_BEYOND_COMMITTED",
        409,
        "4 > 2",
    )


@pytest.mark.parametrize(
    ("call", "answer", "kind"),
    [
        (lambda c: c.release_lease("l1"), _answer(403, "TENANT_SCOPE_DENIED"), ResolverRefused),
        (lambda c: c.renew_lease("l1", 60), _answer(410, "LEASE_RELEASED"), RetainedEventsGone),
        (lambda c: c.export("e1"), _answer(404, "EXPORT_NOT_FOUND"), ResolverForgot),
        (lambda c: c.streams(), _answer(403, "FORBIDDEN"), ResolverRefused),
        (lambda c: c.retained_events(STREAM, 0), _answer(410, "CURSOR_PRUNED"), RetainedEventsGone),
        (lambda c: c.export_events("l1", 1, 0), _answer(404, "LEASE_NOT_FOUND"), ResolverForgot),
        (lambda c: c.create_lease(STREAM, "h", 60), _answer(422, "TTL_TOO_LONG"), ResolverRefused),
    ],
)
def test_no_call_lets_an_http_error_through(
    call: Callable[[ResolverClient], object], answer: httpx.Response, kind: type[Exception]
) -> None:
    c = client(answers(answer), [])
    with pytest.raises(ResolverRefused) as refused:
        call(c)
    assert type(refused.value) is kind


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


def test_releasing_a_lease_the_resolver_no_longer_holds_counts_as_done() -> None:
    # Released, forgotten (a restore from before it was taken) or gone: it pins nothing.
    c = client(
        answers(
            httpx.Response(204), _answer(404, "LEASE_NOT_FOUND"), _answer(410, "LEASE_RELEASED")
        ),
        [],
    )
    assert [c.release_lease("l1") for _ in range(3)] == [True, False, False]
    with pytest.raises(ResolverRefused):  # a 404 naming something else is no release
        client(answers(_answer(404, "NOT_FOUND")), []).release_lease("l1")
