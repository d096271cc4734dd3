"""A development key pair for collector tokens, and minting tokens with it.

Generated once into ``.local/collector-jwt/`` (an ES256 / P-256 key; the private key
mode 0600, never in the repository). The local API is configured with the public key
only (``GAPLESS_COLLECTOR_JWT_PUBLIC_KEY``), the way a deployment is configured with
its issuer's key; ``gapless collector-token`` signs with the private one.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from infra.local.layout import Layout

ISSUER = "gapless-local-dev"
AUDIENCE = "gapless-resolver-api"
ALGORITHM = "ES256"


def _dir(layout: Layout) -> Path:
    return layout.local / "collector-jwt"


def _private_path(layout: Layout) -> Path:
    return _dir(layout) / "private.pem"


def _ensure(layout: Layout) -> None:
    """Create the key pair unless it exists. O_EXCL makes two concurrent first calls
    agree: one writes, the other reads what the winner wrote."""
    path = _private_path(layout)
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as sink:
            sink.write(pem)


def _private_key(layout: Layout) -> ec.EllipticCurvePrivateKey:
    _ensure(layout)
    key = serialization.load_pem_private_key(_private_path(layout).read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key


def public_key_pem(layout: Layout) -> str:
    """The dev public key (PEM), creating the pair on first use."""
    return (
        _private_key(layout)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def mint(
    layout: Layout, client_id: str, tenant_id: str | None = None, ttl_seconds: int = 3600
) -> str:
    """A collector token for ``client_id`` signed with the dev key."""
    now = int(time.time())
    claims: dict[str, object] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": client_id,
        "client_id": client_id,
        "iat": now,
        "exp": now + ttl_seconds,
    }
    if tenant_id:
        claims["tenant_id"] = tenant_id
    return jwt.encode(claims, _private_key(layout), algorithm=ALGORITHM)
