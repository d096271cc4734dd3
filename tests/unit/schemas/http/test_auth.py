"""Token hashes scoped to tenants, with a role on each (GAPLESS_API_TOKENS)."""

from __future__ import annotations

import pytest

from schemas.http.auth import Grant, Principal, Role, parse_grants, token_hash
from schemas.http.exceptions import RoleDenied, TenantScopeDenied

H1 = token_hash("one")
H2 = token_hash("two")


def test_tokens_are_configured_by_hash_with_tenants_or_star() -> None:
    grants = parse_grants(f"{H1}:t1|t2, {H2.upper()}:*")
    assert grants[H1] == Grant(frozenset({"t1", "t2"}))
    assert grants[H2] == Grant(None)
    assert grants[H1].allows("t1") and not grants[H1].allows("t3")
    assert grants[H2].allows("anyone")


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("", "no token"),
        ("one:t1", "64 hex digits"),
        (f"{H1}", "tenant names"),
        (f"{H1}:t1||t2", "tenant names"),
        (f"{H1}:t1,{H1}:t2", "twice"),
    ],
)
def test_bad_token_lists_are_refused_without_echoing_them(spec: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as caught:
        parse_grants(spec)
    assert H1 not in str(caught.value)


def test_a_scope_gives_a_role_per_tenant_and_without_one_admin() -> None:
    grants = parse_grants(f"{H1}:t1=operator|t2=viewer|t3, {H2}:*=viewer|t1=admin")
    mixed, everywhere = grants[H1], grants[H2]
    assert [mixed.role_on(t) for t in ("t1", "t2", "t3", "t4")] == [
        Role.OPERATOR,
        Role.VIEWER,
        Role.ADMIN,
        None,
    ]
    assert mixed.tenants == frozenset({"t1", "t2", "t3"}) and everywhere.tenants is None
    assert (everywhere.role_on("t1"), everywhere.role_on("anyone")) == (Role.ADMIN, Role.VIEWER)
    assert parse_grants(f"{H1}:t1=Admin|t2=admin")[H1] == Grant(frozenset({"t1", "t2"}))
    assert parse_grants(f"{H1}:*=admin")[H1] == Grant(None)
    assert Role.VIEWER < Role.OPERATOR < Role.ADMIN


def test_the_higher_of_a_tenant_role_and_the_star_role_holds() -> None:
    grant = parse_grants(f"{H1}:t1=viewer|*=operator")[H1]
    assert grant.role_on("t1") == Role.OPERATOR and grant.highest() == Role.OPERATOR


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (f"{H1}:t1=owner", "viewer, operator, admin"),
        (f"{H1}:t1=", "viewer, operator, admin"),
        (f"{H1}:=viewer", "tenant names"),
        (f"{H1}:t1=viewer|t1=admin", "twice"),
    ],
)
def test_bad_roles_are_refused_naming_the_entry(spec: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as caught:
        parse_grants(spec)
    assert "entry 1" in str(caught.value) and H1 not in str(caught.value)


def test_a_principal_needs_the_route_role_on_the_tenant() -> None:
    grant = parse_grants(f"{H1}:t1=operator|t2=viewer")[H1]
    Principal("id", grant, Role.OPERATOR).require_tenant("t1")
    Principal("id", grant, Role.VIEWER).require_tenant("t2")
    with pytest.raises(RoleDenied, match=r"operator role on tenant 't2'.*viewer there"):
        Principal("id", grant, Role.OPERATOR).require_tenant("t2")
    with pytest.raises(TenantScopeDenied):
        Principal("id", grant, Role.VIEWER).require_tenant("t3")
    Principal("id", grant, Role.OPERATOR).require_role_somewhere()
    with pytest.raises(RoleDenied, match=r"needs the admin role; .* at most operator"):
        Principal("id", grant, Role.ADMIN).require_role_somewhere()
