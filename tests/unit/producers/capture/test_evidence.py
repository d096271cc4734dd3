"""The evidence store's bounds, against a fake S3 client: put-if-absent, the retry
budget, which answers are retried, and the concurrency limit."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from producers.capture.evidence import EvidenceStore
from producers.capture.exceptions import EvidenceRejected, EvidenceUnavailable
from tests.fixtures.waits import wait_for


def client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject"
    )


class FakeS3:
    def __init__(
        self,
        answers: list[Exception | None] | None = None,
        pause: float = 0,
        hold: threading.Event | None = None,
    ) -> None:
        self.answers = list(answers or [])
        self.calls: list[dict[str, Any]] = []
        self.pause = pause
        self.hold = hold
        """Each put waits until this is set, when given."""
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()

    def put_object(self, **kwargs: Any) -> dict[str, Any]:
        with self._lock:
            self.calls.append(kwargs)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            answer = self.answers.pop(0) if self.answers else None
        time.sleep(self.pause)
        if self.hold is not None:
            assert self.hold.wait(30), "the test never released the held put"
        with self._lock:
            self.in_flight -= 1
        if answer is not None:
            raise answer
        return {}


def store(fake: FakeS3, **kwargs: Any) -> EvidenceStore:
    kwargs.setdefault("backoff_base", 0.001)
    kwargs.setdefault("backoff_cap", 0.002)
    return EvidenceStore(fake, "bucket", **kwargs)  # type: ignore[arg-type]


def test_the_put_is_content_addressed_and_conditional() -> None:
    fake = FakeS3()
    key, written = store(fake).put(b"abc", "text/plain")
    assert key == "sha256/ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert written
    call = fake.calls[0]
    assert (call["Key"], call["IfNoneMatch"], call["ContentType"]) == (key, "*", "text/plain")


def test_412_means_already_stored() -> None:
    fake = FakeS3([client_error("PreconditionFailed", 412)])
    assert store(fake).put(b"abc", "text/plain")[1] is False
    assert len(fake.calls) == 1


def test_transient_failures_are_retried_within_the_budget() -> None:
    fake = FakeS3(
        [
            EndpointConnectionError(endpoint_url="http://s3"),
            client_error("SlowDown", 503),
            client_error("ConditionalRequestConflict", 409),
        ]
    )
    assert store(fake, max_attempts=4).put(b"abc", "text/plain")[1] is True
    assert len(fake.calls) == 4


def test_the_budget_is_bounded() -> None:
    fake = FakeS3([client_error("InternalError", 500)] * 10)
    with pytest.raises(EvidenceUnavailable, match="after 3 attempts"):
        store(fake, max_attempts=3).put(b"abc", "text/plain")
    assert len(fake.calls) == 3


def test_a_refusal_is_not_retried() -> None:
    fake = FakeS3([client_error("AccessDenied", 403)])
    with pytest.raises(EvidenceRejected):
        store(fake).put(b"abc", "text/plain")
    assert len(fake.calls) == 1


def test_puts_in_flight_stay_under_the_limit() -> None:
    fake = FakeS3(pause=0.02)
    evidence = store(fake, max_concurrency=2)
    threads = [
        threading.Thread(target=evidence.put, args=(bytes([i]), "text/plain")) for i in range(12)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(fake.calls) == 12
    assert fake.most_in_flight == 2


def test_a_busy_limit_answers_unavailable_instead_of_queueing_forever() -> None:
    release = threading.Event()
    fake = FakeS3(hold=release)
    evidence = store(fake, max_concurrency=1, slot_timeout=0.05)
    holder = threading.Thread(target=evidence.put, args=(b"a", "text/plain"))
    holder.start()
    wait_for(lambda: fake.in_flight == 1, "the first put holding the only slot", 30)
    with pytest.raises(EvidenceUnavailable, match="busy"):
        evidence.put(b"b", "text/plain")
    release.set()
    holder.join()
