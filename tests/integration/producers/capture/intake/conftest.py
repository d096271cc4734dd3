"""Fixtures of the intake tests: an API with a test collector key, registered
collectors, tokens, and helpers to read what intake left in each store."""

from __future__ import annotations

import base64
import os
import secrets
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jwt
import psycopg
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from fastapi.testclient import TestClient
from pydantic import SecretStr

from db.objects import s3_client
from db.settings import DatabaseSettings
from producers.api import create_app
from producers.capture.intake import collectors
from producers.settings import ApiSettings
from schemas.http.auth import token_hash

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

ISSUER = "test-issuer"
AUDIENCE = "gapless-resolver-api"
OPERATOR_T1 = "operator-token-of-t1"
OPERATOR_T2 = "operator-token-of-t2"


@dataclass(frozen=True)
class CollectorKey:
    private: ec.EllipticCurvePrivateKey
    public_pem: str

    def token(self, client_id: str, **claims: Any) -> str:
        now = int(time.time())
        body: dict[str, Any] = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": client_id,
            "iat": now,
            "exp": now + 600,
            **claims,
        }
        return jwt.encode(body, self.private, algorithm="ES256")


@pytest.fixture(scope="session")
def collector_key() -> CollectorKey:
    private = ec.generate_private_key(ec.SECP256R1())
    public = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return CollectorKey(private, public.decode())


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


MakeSettings = Callable[..., ApiSettings]


@pytest.fixture()
def make_settings(clean_db: DatabaseSettings, collector_key: CollectorKey) -> MakeSettings:
    def make(**overrides: Any) -> ApiSettings:
        values: dict[str, Any] = {
            "api_tokens": SecretStr(f"{token_hash(OPERATOR_T1)}:t1,{token_hash(OPERATOR_T2)}:t2"),
            "resolver_dsn": clean_db.resolver_dsn,
            "control_dsn": clean_db.control_dsn,
            "collector_jwt_public_key": collector_key.public_pem,
            "collector_jwks_url": None,
            "collector_jwt_issuer": ISSUER,
            "collector_jwt_audience": AUDIENCE,
            "enqueue_timeout_seconds": 2.0,
            "intake_max_artifact_bytes": 4096,
        }
        values.update(overrides)
        return ApiSettings(**values)

    return make


@pytest.fixture()
def api_settings(make_settings: MakeSettings, topic: str) -> ApiSettings:
    return make_settings(jobs_topic=topic)


@pytest.fixture()
def client(api_settings: ApiSettings) -> Iterator[TestClient]:
    with TestClient(create_app(api_settings), raise_server_exceptions=False) as test_client:
        yield test_client


def register(
    settings: DatabaseSettings, client_id: str, tenant: str, source: str, instance: str
) -> None:
    with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
        collectors.register(conn, client_id, tenant, source, instance)


@pytest.fixture()
def collector(clean_db: DatabaseSettings, collector_key: CollectorKey) -> str:
    """A registered collector (t1/shop/inst-a); returns its token."""
    register(clean_db, "client-a", "t1", "shop", "inst-a")
    return collector_key.token("client-a")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def capture_body(content: bytes | None = None, **fields: Any) -> dict[str, Any]:
    """A valid capture body with unique content unless ``content`` is given."""
    content = content if content is not None else b"<html>" + secrets.token_bytes(16) + b"</html>"
    body: dict[str, Any] = {
        "schema_version": 1,
        "source_url": "https://shop.example/p/1",
        "captured_at": "2026-11-30T12:00:00+00:00",
        "content_type": "text/html; charset=utf-8",
        "artifact": base64.b64encode(content).decode(),
    }
    body.update(fields)
    return body


def post(client: TestClient, token: str, body: dict[str, Any], key: str | None = None) -> Any:
    headers = {**bearer(token), "Idempotency-Key": key or uuid.uuid4().hex}
    return client.post("/v1/captures", json=body, headers=headers)


def counts(settings: DatabaseSettings) -> dict[str, int]:
    with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
        return {
            table: int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # type: ignore[index]
            for table in ("capture", "receipt", "intake_job")
        }


@pytest.fixture()
def s3(api_settings: ApiSettings) -> S3Client:
    return s3_client(api_settings)


def object_bytes(s3: S3Client, bucket: str, key: str) -> bytes | None:
    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None


@pytest.fixture(autouse=True)
def _local_env(services: dict[str, str]) -> None:
    assert os.environ.get("GAPLESS_S3_ENDPOINT"), "use_local_services sets the S3 variables"
