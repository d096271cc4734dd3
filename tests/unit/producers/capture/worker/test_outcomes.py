"""Failures are classified and sanitized before anyone stores or shows them; the
retry budget is bounded and jittered."""

from __future__ import annotations

import random

import psycopg
import psycopg.errors
import pytest
from hypothesis import given
from hypothesis import strategies as st

from producers.capture.exceptions import EvidenceMissing, EvidenceUnavailable, MalformedCapture
from producers.capture.worker.outcomes import MAX_ERROR_CHARS, classify, sanitize
from producers.capture.worker.retries import RetryPolicy
from producers.resolver.exceptions import DomainError, TargetNotActive


class _RaceLost(DomainError):
    code = "IDENTITY_CONFLICT"


@pytest.mark.parametrize(
    ("exc", "code", "retryable"),
    [
        (EvidenceUnavailable("down"), "EVIDENCE_UNAVAILABLE", True),
        (EvidenceMissing("gone"), "EVIDENCE_MISSING", False),
        (MalformedCapture("bad"), "MALFORMED_CAPTURE", False),
        (TargetNotActive("retired"), "TARGET_NOT_ACTIVE", False),
        (_RaceLost("another writer took the hash"), "IDENTITY_CONFLICT", True),
        (psycopg.errors.SerializationFailure("x"), "DB_CONFLICT", True),
        (psycopg.errors.DeadlockDetected("x"), "DB_CONFLICT", True),
        (psycopg.OperationalError("server closed the connection"), "DB_UNAVAILABLE", True),
        (psycopg.errors.UniqueViolation("dup"), "DB_INTEGRITY", True),
        (KeyError("price"), "INTERNAL_ERROR", True),
    ],
)
def test_every_failure_gets_a_stable_code_and_a_retry_class(
    exc: Exception, code: str, retryable: bool
) -> None:
    classified = classify(exc)
    assert (classified.code, classified.retryable) == (code, retryable)


@pytest.mark.parametrize(
    ("raw", "secret"),
    [
        ("connection to postgresql://app:hunter2@db:5432/resolver failed", "hunter2"),
        ("password=hunter2 host=db", "hunter2"),
        ("Authorization: Bearer eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl", "eyJzdWIiOi"),
        ("s3 said: AccessDenied for AKIAABCDEFGHIJKLMNOP", "AKIAABCDEFGHIJKLMNOP"),
        ("aws_secret_access_key: 'wJalrXUtnFEMI/K7MDENG'", "wJalrXUtnFEMI"),
        ('{"token": "abc.def.ghi"}', "abc.def.ghi"),
    ],
)
def test_sanitize_masks_credentials(raw: str, secret: str) -> None:
    assert secret not in sanitize(raw)
    assert secret not in classify(RuntimeError(raw)).message


@given(st.text())
def test_sanitized_text_is_bounded_single_line_and_stable(raw: str) -> None:
    once = sanitize(raw)
    assert len(once) <= MAX_ERROR_CHARS
    assert "\n" not in once and "\x00" not in once
    assert sanitize(once) == once


def test_the_retry_budget_is_bounded_and_jittered() -> None:
    policy = RetryPolicy(max_attempts=4, base_seconds=1.0, cap_seconds=3.0)
    rng = random.Random(7)
    delays = [policy.delay_after(n, rng) for n in range(1, 6)]
    assert delays[3:] == [None, None]  # the fourth failure spends the budget
    assert all(d is not None for d in delays[:3])
    assert [d is not None and c / 2 <= d <= c for d, c in zip(delays, (1, 2, 3), strict=False)] == [
        True,
        True,
        True,
    ]
    assert len({policy.delay_after(2) for _ in range(20)}) > 1  # jitter spreads retries
