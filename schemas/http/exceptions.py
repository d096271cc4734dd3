"""Errors the HTTP layer raises itself (authentication, tenant scope, roles), each with its
stable code and status."""

from __future__ import annotations

from collections.abc import Mapping

from schemas.errors import GaplessError


class ApiError(GaplessError):
    code = "API_ERROR"
    http_status = 400

    def __init__(self, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message, headers=headers)


class Unauthenticated(ApiError):
    code = "UNAUTHENTICATED"
    http_status = 401


class TenantScopeDenied(ApiError):
    code = "TENANT_SCOPE_DENIED"
    http_status = 403


class RoleDenied(ApiError):
    """The token may act on the tenant, but not with the role the route needs; the
    message names that role."""

    code = "ROLE_DENIED"
    http_status = 403
