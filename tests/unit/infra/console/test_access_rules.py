"""The console's access rules, held without a database: a session's role on each
tenant (the APIs' grants), its CSRF token, and the routes themselves: every
state-changing POST takes the session's CSRF token and goes through the audit, and
every page needs a session."""

from __future__ import annotations

import ast
import inspect
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import SecretStr

from infra.console import pages
from infra.console.app import create_app
from infra.console.assets import SCRIPT_PATH
from infra.console.auth import Session, current_session, scope_text
from infra.console.settings import ConsoleSettings
from schemas.http.auth import Role, parse_grants, token_hash
from schemas.http.exceptions import RoleDenied, TenantScopeDenied
from tests.unit.table_writes import parse

TOKEN = "a-token"
GRANT = parse_grants(f"{token_hash(TOKEN)}:t1=operator|*=viewer")[token_hash(TOKEN)]
PUBLIC = {"/login", "/healthz", "/readyz", "/metrics", "/", SCRIPT_PATH}


def _session(session_id: str = "s1") -> Session:
    return Session(session_id, "alice", token_hash(TOKEN)[:8], GRANT, datetime.now(UTC))


def test_a_session_holds_its_tokens_role_on_each_tenant() -> None:
    session = _session()
    session.require(Role.OPERATOR, "t1")
    session.require(Role.VIEWER, "t2")  # '*' gives every tenant the viewer role
    session.require(Role.VIEWER, None)
    with pytest.raises(RoleDenied):
        session.require(Role.OPERATOR, "t2")
    with pytest.raises(RoleDenied):
        session.require(Role.ADMIN, "t1")
    with pytest.raises(RoleDenied):  # a message of no known tenant needs the role on '*'
        session.require(Role.OPERATOR, None)
    scoped = Session(
        "s", "bob", "x", parse_grants(f"{'a' * 64}:t1=admin")["a" * 64], session.expires_at
    )
    with pytest.raises(TenantScopeDenied):
        scoped.require(Role.VIEWER, "t2")
    assert scoped.sees("t1") and not scoped.sees("t2") and not scoped.sees(None)
    assert scope_text(GRANT) == "*=viewer|t1=operator"


def test_the_csrf_token_is_the_sessions_own() -> None:
    one, other = _session("s1"), _session("s2")
    assert one.csrf == _session("s1").csrf != other.csrf
    assert "s1" not in one.csrf and len(one.csrf) == 64
    assert one.csrf_matches(one.csrf)
    assert not one.csrf_matches(other.csrf)
    assert not one.csrf_matches(None) and not one.csrf_matches("")


def _routes() -> list[tuple[str, APIRoute, Dependant]]:
    """(path, route, dependant) of every route the app serves; never started (the
    pools open in its lifespan)."""
    settings = ConsoleSettings(api_tokens=SecretStr(f"{token_hash(TOKEN)}:*=admin"))
    found = []
    for context in iter_route_contexts(create_app(settings).routes):
        route = context.original_route
        if isinstance(route, APIRoute):
            found.append((str(context.path_format), route, context.dependant or route.dependant))
    return found


def test_every_state_changing_post_takes_the_csrf_token_and_is_audited() -> None:
    posts = [(p, r, d) for p, r, d in _routes() if "POST" in (r.methods or ()) and p != "/login"]
    assert len(posts) == 12
    for path, route, dependant in posts:
        assert "csrf" in {p.name for p in dependant.body_params}, path
        source = inspect.getsource(route.endpoint)
        assert "acting(" in source or path == "/logout", path


def test_every_page_needs_a_session() -> None:
    paths = set()
    for path, _route, dependant in _routes():
        paths.add(path)
        if path in PUBLIC:
            continue
        assert current_session in {d.call for d in dependant.dependencies}, path
    assert {"/streams", "/streams/table", "/audit", "/quarantine/{entry_id}"} <= paths


def test_pages_import_no_cli() -> None:
    """The console is a front end of its own: it reads through the modules the CLI
    reads through, never through the CLI."""
    root = Path(pages.__file__).parents[1]
    for path in root.rglob("*.py"):
        for node in ast.walk(parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith("infra.cli"), path
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("infra.cli") for a in node.names), path
