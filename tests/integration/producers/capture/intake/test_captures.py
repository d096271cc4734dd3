"""POST /v1/captures: the receipt, idempotent replay, request checks, concurrency and a
crash between the object-store put and the commit."""

from __future__ import annotations

import hashlib
import threading
import uuid
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from db.repositories import capture_jobs
from db.settings import DatabaseSettings
from db.unit_of_work import Transaction
from producers.capture.raw import (
    RAW_ENVELOPE_CONTENT_TYPE,
    RawEnvelope,
    RawPart,
    encode_raw_envelope,
)
from producers.settings import ApiSettings

from .conftest import bearer, capture_body, counts, object_bytes, post

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def test_a_capture_gets_a_receipt_and_its_artifact_is_stored(
    client: TestClient,
    collector: str,
    clean_db: DatabaseSettings,
    s3: S3Client,
    api_settings: ApiSettings,
) -> None:
    content = b"<html>a page</html>" + bytes(range(8))
    response = post(client, collector, capture_body(content), key="k-1")
    assert response.status_code == 201, response.text
    receipt = response.json()
    sha = hashlib.sha256(content).hexdigest()
    assert receipt["tenant_id"] == "t1"
    assert receipt["instance_id"] == "inst-a"
    assert receipt["idempotency_key"] == "k-1"
    assert receipt["content_sha256"] == sha
    assert receipt["size_bytes"] == len(content)
    assert receipt["content_type"] == "text/html; charset=utf-8"
    assert receipt["evidence_key"] == f"sha256/{sha}"
    assert object_bytes(s3, api_settings.evidence_bucket, f"sha256/{sha}") == content
    assert counts(clean_db) == {"capture": 1, "receipt": 1, "intake_job": 1}


def test_a_replay_returns_the_same_receipt_and_writes_nothing_more(
    client: TestClient, collector: str, clean_db: DatabaseSettings
) -> None:
    body = capture_body()
    first = post(client, collector, body, key="same")
    again = post(client, collector, body, key="same")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    assert counts(clean_db) == {"capture": 1, "receipt": 1, "intake_job": 1}


def test_a_key_reused_for_another_request_is_409(
    client: TestClient, collector: str, clean_db: DatabaseSettings
) -> None:
    assert post(client, collector, capture_body(), key="k").status_code == 201
    other = post(client, collector, capture_body(), key="k")
    assert other.status_code == 409
    assert other.json()["code"] == "IDEMPOTENCY_KEY_REUSED"
    moved = post(client, collector, capture_body(source_url="https://x.example/"), key="k")
    assert moved.json()["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert counts(clean_db) == {"capture": 1, "receipt": 1, "intake_job": 1}


def test_the_same_key_of_two_instances_makes_two_captures(
    client: TestClient, collector: str, clean_db: DatabaseSettings, collector_key: Any
) -> None:
    from .conftest import register

    register(clean_db, "client-b", "t1", "shop", "inst-b")
    body = capture_body()
    a = post(client, collector, body, key="shared")
    b = post(client, collector_key.token("client-b"), body, key="shared")
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["capture_id"] != b.json()["capture_id"]
    assert a.json()["evidence_key"] == b.json()["evidence_key"]  # one object, two captures


def test_too_large_artifacts_and_bodies_are_413(client: TestClient, collector: str) -> None:
    big = post(client, collector, capture_body(b"x" * 4097))  # the limit is 4096
    assert big.status_code == 413
    assert big.json()["code"] == "PAYLOAD_TOO_LARGE"
    huge = client.post(
        "/v1/captures",
        content=b'{"artifact": "' + b"A" * 200_000 + b'"}',
        headers={**bearer(collector), "Idempotency-Key": "h", "Content-Type": "application/json"},
    )
    assert huge.status_code == 413
    assert huge.json()["code"] == "PAYLOAD_TOO_LARGE"
    assert post(client, collector, capture_body(b"x" * 4096)).status_code == 201


def test_unaccepted_media_types_are_415(client: TestClient, collector: str) -> None:
    wrong = post(client, collector, capture_body(content_type="application/x-msdownload"))
    assert wrong.status_code == 415
    assert wrong.json()["code"] == "UNSUPPORTED_MEDIA_TYPE"
    not_json = client.post(
        "/v1/captures",
        content=b"<html></html>",
        headers={**bearer(collector), "Idempotency-Key": "n", "Content-Type": "text/html"},
    )
    assert not_json.status_code == 415
    assert not_json.json()["code"] == "UNSUPPORTED_MEDIA_TYPE"


def test_a_raw_envelope_is_accepted_and_a_malformed_one_is_422(
    client: TestClient, collector: str, clean_db: DatabaseSettings
) -> None:
    envelope = RawEnvelope(
        (
            RawPart("document", "text/html; charset=utf-8", b"<html>page</html>"),
            RawPart("offers", "application/json", b'{"items": []}'),
        )
    )
    body = capture_body(encode_raw_envelope(envelope), content_type=RAW_ENVELOPE_CONTENT_TYPE)
    accepted = post(client, collector, body)
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["content_type"] == RAW_ENVELOPE_CONTENT_TYPE
    broken = post(client, collector, capture_body(content_type=RAW_ENVELOPE_CONTENT_TYPE))
    assert broken.status_code == 422
    assert broken.json()["code"] == "MALFORMED_RAW_ENVELOPE"
    assert counts(clean_db) == {"capture": 1, "receipt": 1, "intake_job": 1}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"schema_version": 2}, "body.schema_version"),
        ({"source_url": "ftp://x"}, "body.source_url"),
        ({"captured_at": "2026-11-30T12:00:00"}, "body.captured_at"),
        # Valid ISO 8601, but before year 1 or after 9999 once in UTC.
        ({"captured_at": "0001-01-01T00:00:00+14:00"}, "body.captured_at"),
        ({"captured_at": "9999-12-31T23:59:59-14:00"}, "body.captured_at"),
        ({"artifact": "not base64!"}, "body.artifact"),
        ({"content_type": ""}, "body.content_type"),
        ({"extra": 1}, "body.extra"),
    ],
)
def test_field_errors_are_422_naming_the_field(
    client: TestClient, collector: str, change: dict[str, Any], field: str
) -> None:
    response = post(client, collector, capture_body(**change))
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "VALIDATION_FAILED"
    assert field in response.json()["message"]


def test_a_missing_field_and_idempotency_key_are_named(client: TestClient, collector: str) -> None:
    body = capture_body()
    del body["captured_at"]
    response = client.post("/v1/captures", json=body, headers=bearer(collector))
    assert response.status_code == 422
    message = response.json()["message"]
    assert "body.captured_at" in message and "header.Idempotency-Key" in message


def test_collectors_must_present_a_valid_registered_token(
    client: TestClient, collector: str, collector_key: Any
) -> None:
    body = capture_body()
    assert (
        client.post("/v1/captures", json=body, headers={"Idempotency-Key": "a"}).json()["code"]
        == "UNAUTHENTICATED"
    )
    for token in (
        collector_key.token("unregistered"),
        collector_key.token("client-a", aud="someone-else"),
        collector_key.token("client-a", iss="someone-else"),
        collector_key.token("client-a", exp=1),
        collector + "x",
    ):
        response = post(client, token, body)
        assert response.status_code == 401, token
        assert response.json()["code"] == "UNAUTHENTICATED"
    wrong_tenant = post(client, collector_key.token("client-a", tenant_id="t2"), body)
    assert wrong_tenant.status_code == 403
    assert wrong_tenant.json()["code"] == "TENANT_SCOPE_DENIED"


def test_concurrent_duplicates_leave_one_durable_effect(
    client: TestClient, collector: str, clean_db: DatabaseSettings
) -> None:
    body = capture_body()
    answers: list[Any] = []
    start = threading.Barrier(8)

    def send() -> None:
        start.wait()
        answers.append(post(client, collector, body, key="raced"))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200] * 7 + [201], [a.text for a in answers]
    assert len({a.json()["receipt_id"] for a in answers}) == 1
    assert counts(clean_db) == {"capture": 1, "receipt": 1, "intake_job": 1}


def test_a_crash_after_the_put_and_before_commit_replays_to_the_same_state(
    client: TestClient,
    collector: str,
    clean_db: DatabaseSettings,
    s3: S3Client,
    api_settings: ApiSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    content = b'{"sku": "crash"}' + bytes(8)
    body = capture_body(content, content_type="application/json")
    real_insert_job = capture_jobs.insert_pending

    def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("process died inside the transaction")

    monkeypatch.setattr(capture_jobs, "insert_pending", crash)
    failed = post(client, collector, body, key="crashy")
    assert failed.status_code == 500
    key = "sha256/" + hashlib.sha256(content).hexdigest()
    assert object_bytes(s3, api_settings.evidence_bucket, key) == content  # the put happened
    assert counts(clean_db) == {"capture": 0, "receipt": 0, "intake_job": 0}  # rolled back

    monkeypatch.setattr(capture_jobs, "insert_pending", real_insert_job)
    retried = post(client, collector, body, key="crashy")
    assert retried.status_code == 201  # the put answered 412: already there, success
    again = post(client, collector, body, key="crashy")
    assert again.status_code == 200 and again.json() == retried.json()
    assert counts(clean_db) == {"capture": 1, "receipt": 1, "intake_job": 1}
    assert object_bytes(s3, api_settings.evidence_bucket, key) == content


def test_a_stored_artifact_is_never_overwritten(
    client: TestClient, collector: str, s3: S3Client, api_settings: ApiSettings
) -> None:
    content = b"first" + bytes(12)
    key = "sha256/" + hashlib.sha256(content).hexdigest()
    s3.put_object(Bucket=api_settings.evidence_bucket, Key=key, Body=content)
    response = post(client, collector, capture_body(content))
    assert response.status_code == 201
    assert response.json()["evidence_key"] == key
    head = s3.head_object(Bucket=api_settings.evidence_bucket, Key=key)
    assert head["ContentLength"] == len(content)


def test_the_job_row_is_enqueued_after_commit(
    client: TestClient, collector: str, clean_db: DatabaseSettings
) -> None:
    receipt = post(client, collector, capture_body()).json()
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        job = capture_jobs.get(Transaction(conn), uuid.UUID(receipt["job_id"]))
    assert job is not None
    assert (job.status, job.attempts, job.last_error) == ("enqueued", 1, None)


def test_a_process_killed_before_commit_leaves_an_object_and_a_replay_converges(
    client: TestClient,
    collector: str,
    clean_db: DatabaseSettings,
    s3: S3Client,
    api_settings: ApiSettings,
) -> None:
    import subprocess
    import sys

    content = b"<html>killed</html>" + uuid.uuid4().bytes
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.integration.producers.capture.intake.crash_child",
            clean_db.resolver_dsn,
            "killed-key",
            content.hex(),
        ],
        capture_output=True,
        timeout=60,
    )
    assert child.returncode == -9, child.stderr.decode()
    key = "sha256/" + hashlib.sha256(content).hexdigest()
    assert object_bytes(s3, api_settings.evidence_bucket, key) == content
    assert counts(clean_db) == {"capture": 0, "receipt": 0, "intake_job": 0}

    body = capture_body(
        content,
        source_url="https://shop.example/p/1",
        captured_at="2026-11-30T12:00:00+00:00",
        content_type="text/html; charset=utf-8",
    )
    first = post(client, collector, body, key="killed-key")
    again = post(client, collector, body, key="killed-key")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    assert first.json()["evidence_key"] == key
    assert counts(clean_db) == {"capture": 1, "receipt": 1, "intake_job": 1}
