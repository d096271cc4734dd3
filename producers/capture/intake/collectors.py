"""Collector authentication and the credential registry.

A collector presents a bearer JWT. Its signature is checked against the configured
public key or the issuer's JWKS; ``iss``, ``aud``, ``exp`` and ``sub`` are required.
The client id (the ``client_id`` claim, else ``sub``) is looked up in the credential
registry, which maps it to the stable (tenant, source, instance) the collector acts
as. Rotating a credential registers a new client id for the same instance, so
everything the instance owns stays reachable; receipts are matched by instance,
never by client id.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import jwt
import psycopg
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from db.resolver import intake as sql
from producers.capture.intake.exceptions import CollectorKeysUnavailable, CollectorRegistryError
from producers.capture.settings import IntakeSettings
from schemas.http.exceptions import TenantScopeDenied, Unauthenticated

log = logging.getLogger(__name__)

LEEWAY_SECONDS = 30
_BEARER = {"WWW-Authenticate": "Bearer"}


@dataclass(frozen=True, slots=True)
class Collector:
    """An authenticated collector: the credential it used and the instance it is."""

    client_id: str
    tenant_id: str
    source: str
    instance_id: str


class CollectorVerifier:
    """Checks collector JWTs. Built once per process; without a configured key every
    collector token is refused (operators can still use the API)."""

    def __init__(self, settings: IntakeSettings) -> None:
        self._issuer = settings.collector_jwt_issuer
        self._audience = settings.collector_jwt_audience
        self._algorithms = settings.algorithms()
        self._key: Any = None
        self._jwks: jwt.PyJWKClient | None = None
        if settings.collector_jwt_public_key:
            try:
                self._key = load_pem_public_key(settings.collector_jwt_public_key.encode())
            except ValueError as exc:
                raise ValueError(
                    f"GAPLESS_COLLECTOR_JWT_PUBLIC_KEY is not a PEM public key: {exc}"
                ) from exc
        elif settings.collector_jwks_url:
            self._jwks = jwt.PyJWKClient(
                settings.collector_jwks_url, cache_keys=True, lifespan=300, timeout=5
            )
        else:
            log.warning("no collector key configured: collector tokens are refused")

    @property
    def configured(self) -> bool:
        return self._key is not None or self._jwks is not None

    def client_id(self, token: str) -> tuple[str, dict[str, Any]]:
        """The token's client id and claims, or 401 ``UNAUTHENTICATED``."""
        if not self.configured:
            raise Unauthenticated("collector tokens are not accepted here", _BEARER)
        try:
            if self._jwks is not None:
                key: Any = self._jwks.get_signing_key_from_jwt(token).key
            else:
                key = self._key
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=self._algorithms,
                audience=self._audience,
                issuer=self._issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": ["iss", "aud", "exp", "sub"]},
            )
        except jwt.PyJWKClientConnectionError as exc:
            raise CollectorKeysUnavailable(
                f"the collector key set cannot be fetched: {exc}"
            ) from exc
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"invalid collector token: {exc}", _BEARER) from exc
        client_id = claims.get("client_id") or claims["sub"]
        if not isinstance(client_id, str) or not client_id:
            raise Unauthenticated("the token names no client id", _BEARER)
        return client_id, claims


def resolve(conn: psycopg.Connection, client_id: str, claims: dict[str, Any]) -> Collector:
    """The instance a client id acts as; 401 for an unknown or revoked credential,
    403 when the token claims another tenant than the credential's."""
    row = sql.find_credential(conn, client_id)
    if row is None:
        raise Unauthenticated(f"collector {client_id!r} is not registered", _BEARER)
    if row.revoked_at is not None:
        raise Unauthenticated(f"collector credential {client_id!r} is revoked", _BEARER)
    claimed = claims.get("tenant_id")
    if claimed is not None and claimed != row.tenant_id:
        raise TenantScopeDenied(f"the token claims tenant {claimed!r}, not the credential's")
    return Collector(row.client_id, row.tenant_id, row.source, row.instance_id)


# The registry (operator commands) ---------------------------------------------------


def register(
    conn: psycopg.Connection, client_id: str, tenant_id: str, source: str, instance_id: str
) -> sql.CredentialRow:
    """Map ``client_id`` to the instance (created if new). Idempotent for the same
    mapping; a client id registered to another instance is a conflict."""
    with conn.transaction():
        row = sql.insert_credential(conn, client_id, tenant_id, source, instance_id)
    if (row.tenant_id, row.source, row.instance_id) != (tenant_id, source, instance_id):
        raise CollectorRegistryError(
            f"client id {client_id!r} is already registered to another instance"
        )
    return row


def rotate(
    conn: psycopg.Connection, old_client_id: str, new_client_id: str, revoke_old: bool
) -> sql.CredentialRow:
    """Register ``new_client_id`` for the instance of ``old_client_id`` and, if asked,
    revoke the old one in the same transaction."""
    with conn.transaction():
        old = sql.find_credential(conn, old_client_id)
        if old is None:
            raise CollectorRegistryError(f"no credential {old_client_id!r} to rotate")
        row = sql.insert_credential(conn, new_client_id, old.tenant_id, old.source, old.instance_id)
        if (row.tenant_id, row.source, row.instance_id) != (
            old.tenant_id,
            old.source,
            old.instance_id,
        ):
            raise CollectorRegistryError(
                f"client id {new_client_id!r} is already registered to another instance"
            )
        if revoke_old:
            sql.revoke_credential(conn, old_client_id)
    return row


def revoke(conn: psycopg.Connection, client_id: str) -> sql.CredentialRow:
    with conn.transaction():
        row = sql.revoke_credential(conn, client_id)
    if row is None:
        raise CollectorRegistryError(f"no credential {client_id!r}")
    return row
