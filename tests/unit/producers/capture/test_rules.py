"""Intake rules: deterministic identities, request fingerprints, media types, backoff,
and the job message on the wire."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from producers.capture import rules
from producers.capture.intake.limits import request_limit
from schemas.exceptions import CodecError
from schemas.jobs import CAPTURE_JOB, JobMessage


def test_capture_and_job_ids_are_stable_and_scoped() -> None:
    a = rules.capture_id("t1", "shop", "inst-a", "k")
    assert a == rules.capture_id("t1", "shop", "inst-a", "k")
    others = {
        rules.capture_id("t2", "shop", "inst-a", "k"),
        rules.capture_id("t1", "market", "inst-a", "k"),
        rules.capture_id("t1", "shop", "inst-b", "k"),
        rules.capture_id("t1", "shop", "inst-a", "k2"),
        # Joining with a separator would make these two collide; JSON does not.
        rules.capture_id("t1", "shop", "inst-a|k", ""),
    }
    assert a not in others and len(others) == 5
    assert rules.job_id("t1", a, CAPTURE_JOB) == rules.job_id("t1", a, CAPTURE_JOB)
    assert rules.job_id("t1", a, CAPTURE_JOB) != rules.job_id("t1", a, "other")


def test_the_fingerprint_ignores_how_the_same_instant_is_written() -> None:
    at = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    same = at.astimezone(timezone(timedelta(hours=2)))
    base = (1, "https://x.example/", at, "text/html", "ab" * 32)
    assert rules.request_fingerprint(*base) == rules.request_fingerprint(
        1, "https://x.example/", same, "text/html", "ab" * 32
    )
    assert rules.request_fingerprint(*base) != rules.request_fingerprint(
        1, "https://x.example/", at, "text/html", "cd" * 32
    )


@pytest.mark.parametrize(
    ("raw", "essence", "value"),
    [
        ("text/html", "text/html", "text/html"),
        ("Text/HTML; Charset=UTF-8", "text/html", "text/html; charset=utf-8"),
        (
            'application/json; charset="utf-8"; q=1',
            "application/json",
            "application/json; charset=utf-8",
        ),
        ("application/ld+json;", "application/ld+json", "application/ld+json"),
    ],
)
def test_media_types_are_normalized(raw: str, essence: str, value: str) -> None:
    parsed = rules.MediaType.parse(raw)
    assert (parsed.essence, parsed.value) == (essence, value)


@given(st.integers(min_value=0, max_value=10_000), st.integers(min_value=0, max_value=2**32))
def test_backoff_grows_stays_capped_and_never_returns_at_once(attempts: int, seed: int) -> None:
    delay = rules.backoff_seconds(attempts, 2.0, 600.0, random.Random(seed))
    ceiling = min(600.0, 2.0 * 2.0 ** min(max(attempts - 1, 0), 32))
    assert ceiling / 2 <= delay <= ceiling


def test_the_request_limit_leaves_room_for_the_base64_artifact() -> None:
    assert request_limit(3000) >= 4000 + 1024


@given(st.uuids(), st.text(min_size=1), st.uuids())
def test_job_messages_round_trip(job: uuid.UUID, tenant: str, capture: uuid.UUID) -> None:
    message = JobMessage(job, CAPTURE_JOB, tenant, capture)
    assert JobMessage.decode(message.encode()) == message
    assert message.key() == str(job).encode()


@pytest.mark.parametrize("value", [b"", b"{}", b'{"version": 2}', b"\xff"])
def test_foreign_bytes_are_not_job_messages(value: bytes) -> None:
    with pytest.raises(CodecError):
        JobMessage.decode(value)
