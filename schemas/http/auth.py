"""Bearer tokens with a role per tenant, and the role each route needs.

``GAPLESS_API_TOKENS`` lists the SHA-256 hashes of the accepted tokens, each with its
scope: ``<sha256hex>:<scope>``, comma-separated. The scope is ``|``-separated
entries, each a tenant or ``*`` (every tenant), optionally ``=viewer``,
``=operator`` or ``=admin``: ``<sha>:t1=operator|t2=viewer``, ``<sha>:*=viewer|t1=admin``.
An entry without a role is ``admin``: a token written before roles existed
(``<sha>:t1|t2``, ``<sha>:*``) keeps every right it had. A tenant named and also
covered by ``*`` has the higher of the two roles. Only hashes are configured, so the
configuration (and anything that leaks it) cannot be used to call the API.

Roles are ordered ``viewer < operator < admin``; each includes the ones below it.
Every route declares the role it needs with one of ``Viewer``, ``Operator``,
``Admin`` (``ROUTE_ROLES`` lists the dependencies that declare one;
``tests/unit/producers/http/test_route_roles.py`` and
``tests/unit/processors/serving/test_route_roles.py`` fail on a route that declares
none). The declared role is checked against the token's role on the tenant the
request acts on: at once when the path names the tenant or when the token holds
the role on no tenant at all (before the body is read), else when the route learns
the tenant (a lease's, a receipt's) and calls ``Principal.require_tenant``.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, cast

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from schemas.http.exceptions import RoleDenied, TenantScopeDenied, Unauthenticated

ALL_TENANTS = "*"
_HEX64 = re.compile(r"[0-9a-f]{64}")


class Role(enum.IntEnum):
    """What a token may do on a tenant; a higher role includes the lower ones."""

    VIEWER = 1
    """Reads: cases, decisions, items, attributes, generations, streams, receipts."""
    OPERATOR = 2
    """Decisions: review cases, splits, identity generations and their approval."""
    ADMIN = 3
    """Plumbing: consumers, their progress, rebuild leases."""

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def named(cls, label: str) -> Role:
        try:
            return cls[label.upper()]
        except KeyError:
            raise ValueError(f"unknown role {label!r}") from None


_ROLE_LABELS = ", ".join(role.label for role in Role)


@dataclass(frozen=True, slots=True)
class Grant:
    """What one token may do: its role on each tenant it may act on.

    ``tenants`` are the tenants it may act on (``None``: every tenant); ``roles`` maps
    each of them, or ``*``, to its role there. Built from ``tenants`` alone (the form
    before roles), the token is ``admin`` on each.
    """

    tenants: frozenset[str] | None
    roles: Mapping[str, Role] | None = None

    def __post_init__(self) -> None:
        if self.roles is None:
            names = [ALL_TENANTS] if self.tenants is None else sorted(self.tenants)
            object.__setattr__(self, "roles", MappingProxyType(dict.fromkeys(names, Role.ADMIN)))
        elif self.tenants != (None if ALL_TENANTS in self.roles else frozenset(self.roles)):
            raise ValueError("a grant's tenants are the tenants its roles name")

    def _roles(self) -> Mapping[str, Role]:
        assert self.roles is not None  # filled in by __post_init__
        return self.roles

    def role_on(self, tenant_id: str) -> Role | None:
        """The token's role on the tenant; None: it may not act on it at all."""
        roles = self._roles()
        found = [r for r in (roles.get(tenant_id), roles.get(ALL_TENANTS)) if r is not None]
        return max(found) if found else None

    def allows(self, tenant_id: str) -> bool:
        return self.role_on(tenant_id) is not None

    def highest(self) -> Role:
        """Its highest role on any tenant."""
        return max(self._roles().values())


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _scope(number: int, scope: str) -> Grant:
    roles: dict[str, Role] = {}
    for part in scope.split("|"):
        tenant, has_role, label = (p.strip() for p in part.partition("="))
        if not tenant:
            raise ValueError(f"entry {number}: expected '*' or tenant names separated by '|'")
        if tenant in roles:
            raise ValueError(f"entry {number}: a tenant is listed twice")
        try:
            roles[tenant] = Role.named(label) if has_role else Role.ADMIN
        except ValueError:
            raise ValueError(
                f"entry {number}: a role is one of {_ROLE_LABELS} (after '=')"
            ) from None
    tenants = None if ALL_TENANTS in roles else frozenset(roles)
    return Grant(tenants, MappingProxyType(roles))


def parse_grants(spec: str) -> dict[str, Grant]:
    """Parse ``GAPLESS_API_TOKENS``; raises ValueError naming the bad entry's place
    (never its content)."""
    grants: dict[str, Grant] = {}
    entries = [entry.strip() for entry in spec.split(",") if entry.strip()]
    if not entries:
        raise ValueError(
            "no token configured; expected <sha256hex>:tenant1=role|tenant2=role or :*=role"
        )
    for number, entry in enumerate(entries, start=1):
        digest, _, scope = entry.partition(":")
        digest = digest.strip().lower()
        if not _HEX64.fullmatch(digest):
            raise ValueError(f"entry {number}: expected 64 hex digits (a SHA-256) before ':'")
        grant = _scope(number, scope)
        if digest in grants:
            raise ValueError(f"entry {number}: the same token hash is listed twice")
        grants[digest] = grant
    return grants


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller of a request: whose token, what it may touch, and the role the
    route it called needs."""

    token_id: str  # the first hex digits of the token's hash, for logs
    grant: Grant
    needs: Role

    def require_tenant(self, tenant_id: str) -> None:
        """Refuse unless the token may act on the tenant with the role the route
        needs: 403 ``TENANT_SCOPE_DENIED``, or 403 ``ROLE_DENIED`` naming the role."""
        role = self.grant.role_on(tenant_id)
        if role is None:
            raise TenantScopeDenied(f"this token may not act on tenant {tenant_id!r}")
        if role < self.needs:
            raise RoleDenied(
                f"this needs the {self.needs.label} role on tenant {tenant_id!r};"
                f" this token is {role.label} there"
            )

    def require_role_somewhere(self) -> None:
        """Refuse at once a token that holds the needed role on no tenant."""
        if self.grant.highest() < self.needs:
            raise RoleDenied(
                f"this needs the {self.needs.label} role; this token is at most"
                f" {self.grant.highest().label} on every tenant it may act on"
            )


_bearer = HTTPBearer(auto_error=False, description="A token listed in GAPLESS_API_TOKENS.")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
_UNAUTHENTICATED = {"WWW-Authenticate": "Bearer"}


def operator_token(request: Request, token: str, needs: Role) -> Principal | None:
    """The principal of an API token needing ``needs``, checked as far as the request
    tells (see the module docstring); None when ``token`` is not one of the API's.

    The token is hashed and looked up by its hash: what a lookup's timing could
    reveal is about the hash, which is not secret, never about the token.
    """
    digest = token_hash(token)
    grant = cast(dict[str, Grant], request.app.state.grants).get(digest)
    if grant is None:
        return None
    principal = Principal(digest[:8], grant, needs)
    principal.require_role_somewhere()
    tenant_id = request.path_params.get("tenant_id")
    if isinstance(tenant_id, str):
        principal.require_tenant(tenant_id)
    return principal


def _authenticate(request: Request, credentials: Credentials, needs: Role) -> Principal:
    """The request's principal, or 401 ``UNAUTHENTICATED``, or 403."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthenticated("a bearer token is required", _UNAUTHENTICATED)
    principal = operator_token(request, credentials.credentials, needs)
    if principal is None:
        raise Unauthenticated("unknown token", _UNAUTHENTICATED)
    return principal


def require_viewer(request: Request, credentials: Credentials) -> Principal:
    return _authenticate(request, credentials, Role.VIEWER)


def require_operator(request: Request, credentials: Credentials) -> Principal:
    return _authenticate(request, credentials, Role.OPERATOR)


def require_admin(request: Request, credentials: Credentials) -> Principal:
    return _authenticate(request, credentials, Role.ADMIN)


def viewer_if_api_token(request: Request, credentials: Credentials) -> Principal | None:
    """For a route that also accepts another kind of bearer token (receipts: a
    collector's): the viewer principal of an API token, None for any other token."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        return None
    return operator_token(request, credentials.credentials, Role.VIEWER)


Viewer = Annotated[Principal, Depends(require_viewer)]
Operator = Annotated[Principal, Depends(require_operator)]
Admin = Annotated[Principal, Depends(require_admin)]
ViewerIfApiToken = Annotated[Principal | None, Depends(viewer_if_api_token)]

ROUTE_ROLES: Mapping[Callable[..., Principal | None], Role] = MappingProxyType(
    {
        require_viewer: Role.VIEWER,
        require_operator: Role.OPERATOR,
        require_admin: Role.ADMIN,
        viewer_if_api_token: Role.VIEWER,
    }
)
"""The dependencies that declare a route's role, and the role each declares."""
