"""Bearer tokens scoped to tenants.

``GAPLESS_API_TOKENS`` lists the SHA-256 hashes of the accepted tokens, each with the
tenants it may act on: ``<sha256hex>:tenant1|tenant2`` or ``<sha256hex>:*`` for every
tenant, comma-separated. Only hashes are configured, so the configuration (and
anything that leaks it) cannot be used to call the API.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Annotated, cast

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from producers.http.exceptions import TenantScopeDenied, Unauthenticated

ALL_TENANTS = "*"
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class Grant:
    """The tenants one token may act on; ``None`` means every tenant."""

    tenants: frozenset[str] | None

    def allows(self, tenant_id: str) -> bool:
        return self.tenants is None or tenant_id in self.tenants


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def parse_grants(spec: str) -> dict[str, Grant]:
    """Parse ``GAPLESS_API_TOKENS``; raises ValueError naming the bad entry's place
    (never its content)."""
    grants: dict[str, Grant] = {}
    entries = [entry.strip() for entry in spec.split(",") if entry.strip()]
    if not entries:
        raise ValueError("no token configured; expected <sha256hex>:tenant1|tenant2 or :*")
    for number, entry in enumerate(entries, start=1):
        digest, _, scope = entry.partition(":")
        digest = digest.strip().lower()
        if not _HEX64.fullmatch(digest):
            raise ValueError(f"entry {number}: expected 64 hex digits (a SHA-256) before ':'")
        tenants = [t.strip() for t in scope.split("|")]
        if not scope.strip() or any(not t for t in tenants):
            raise ValueError(f"entry {number}: expected '*' or tenant names separated by '|'")
        if digest in grants:
            raise ValueError(f"entry {number}: the same token hash is listed twice")
        grants[digest] = Grant(None if tenants == [ALL_TENANTS] else frozenset(tenants))
    return grants


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller of a request: whose token, and what it may touch."""

    token_id: str  # the first hex digits of the token's hash, for logs
    grant: Grant

    def require_tenant(self, tenant_id: str) -> None:
        if not self.grant.allows(tenant_id):
            raise TenantScopeDenied(f"this token may not act on tenant {tenant_id!r}")


_bearer = HTTPBearer(auto_error=False, description="A token listed in GAPLESS_API_TOKENS.")


def authenticate(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The request's principal, or 401 ``UNAUTHENTICATED``.

    The token is hashed and looked up by its hash: what a lookup's timing could
    reveal is about the hash, which is not secret, never about the token.
    """
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthenticated("a bearer token is required", {"WWW-Authenticate": "Bearer"})
    digest = token_hash(credentials.credentials)
    grant = cast(dict[str, Grant], request.app.state.grants).get(digest)
    if grant is None:
        raise Unauthenticated("unknown token", {"WWW-Authenticate": "Bearer"})
    return Principal(digest[:8], grant)


Caller = Annotated[Principal, Depends(authenticate)]
