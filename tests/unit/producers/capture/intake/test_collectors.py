"""Collector tokens: signature, required claims and the key sources (PEM or JWKS)."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import ValidationError

from producers.capture.intake.collectors import CollectorVerifier
from producers.capture.intake.exceptions import CollectorKeysUnavailable
from producers.capture.settings import IntakeSettings
from schemas.http.exceptions import Unauthenticated

KEY = ec.generate_private_key(ec.SECP256R1())
OTHER = ec.generate_private_key(ec.SECP256R1())
PEM = (
    KEY.public_key()
    .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    .decode()
)


def token(key: Any = KEY, headers: dict[str, Any] | None = None, **claims: Any) -> str:
    body = {"iss": "iss", "aud": "gapless-resolver-api", "sub": "c1", "exp": time.time() + 60}
    body.update(claims)
    return jwt.encode({k: v for k, v in body.items() if v is not None}, key, "ES256", headers)


def verifier(**settings: Any) -> CollectorVerifier:
    values: dict[str, Any] = {"collector_jwt_public_key": PEM, "collector_jwt_issuer": "iss"}
    values.update(settings)
    return CollectorVerifier(IntakeSettings(**values))


def test_a_valid_token_names_its_client() -> None:
    assert verifier().client_id(token())[0] == "c1"
    assert verifier().client_id(token(client_id="c2"))[0] == "c2"


@pytest.mark.parametrize(
    "bad",
    [
        token(key=OTHER),
        token(iss="elsewhere"),
        token(aud="elsewhere"),
        token(exp=time.time() - 120),
        token(exp=None),
        token(sub=None),
        token(iss=None),
        jwt.encode({"iss": "iss", "aud": "gapless-resolver-api", "sub": "c1"}, "k" * 32, "HS256"),
        "not.a.jwt",
    ],
)
def test_bad_tokens_are_401(bad: str) -> None:
    with pytest.raises(Unauthenticated):
        verifier().client_id(bad)


def test_without_a_key_every_token_is_refused() -> None:
    refusing = CollectorVerifier(IntakeSettings(collector_jwt_public_key=None))
    assert not refusing.configured
    with pytest.raises(Unauthenticated):
        refusing.client_id(token())


def test_settings_refuse_two_key_sources_and_a_key_without_issuer() -> None:
    with pytest.raises(ValidationError, match="not both"):
        IntakeSettings(
            collector_jwt_public_key=PEM,
            collector_jwks_url="http://x/jwks",
            collector_jwt_issuer="iss",
        )
    with pytest.raises(ValidationError, match="ISSUER"):
        IntakeSettings(collector_jwt_public_key=PEM, collector_jwt_issuer=None)
    with pytest.raises(ValueError, match="GAPLESS_COLLECTOR_JWT_PUBLIC_KEY"):
        verifier(collector_jwt_public_key="not a pem")


@pytest.fixture()
def jwks_url() -> Iterator[str]:
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(KEY.public_key()))
    body = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "ES256"}]}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/jwks.json"
    server.shutdown()


def test_a_jwks_url_verifies_by_key_id(jwks_url: str) -> None:
    v = verifier(collector_jwt_public_key=None, collector_jwks_url=jwks_url)
    assert v.client_id(token(headers={"kid": "k1"}))[0] == "c1"
    with pytest.raises(Unauthenticated):
        v.client_id(token(key=OTHER, headers={"kid": "k1"}))
    with pytest.raises(Unauthenticated):
        v.client_id(token(headers={"kid": "unknown"}))


def test_an_unreachable_jwks_is_503() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    v = verifier(collector_jwt_public_key=None, collector_jwks_url=f"http://127.0.0.1:{port}/")
    with pytest.raises(CollectorKeysUnavailable):
        v.client_id(token(headers={"kid": "k1"}))
