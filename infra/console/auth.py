"""Who is at the console: login with an API token, the session cookie, CSRF, roles.

A person logs in once with a token of ``GAPLESS_API_TOKENS`` and their name (for the
audit). The console then sets a random session id in an HttpOnly, SameSite=Strict
cookie (Secure with ``GAPLESS_CONSOLE_SECURE_COOKIE``) and records the session in
the control database by the id's SHA-256 (``db.control.console``). The token is
never kept, shown, logged or put in a URL: it is hashed on arrival and only the hash
is looked up, as the APIs do.

Each request finds its session by the cookie; the token behind it must still be
configured, and its grant as configured now is what the request may do (removing a
token from ``GAPLESS_API_TOKENS`` ends its sessions at the console's next start).
Roles are the APIs': a viewer sees, an operator repairs and rebuilds, an admin also
resumes pauses; each on the tenants its grant names (``Session.require``).

Every state-changing form carries the session's CSRF token, derived from the
session id (an HMAC of it), so a page of another site can neither read nor forge
it; the login form, before any session, carries a token of its own matched with a
short-lived cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, Depends, Form, Query, Request, Response
from fastapi.responses import RedirectResponse

from db.control import console as sql
from infra.console.exceptions import CsrfTokenInvalid, FormInvalid, LoginRefused, SessionRequired
from infra.console.resources import Console, console, render
from schemas.http.auth import ALL_TENANTS, Grant, Role, token_hash
from schemas.http.exceptions import RoleDenied, TenantScopeDenied

log = logging.getLogger(__name__)

SESSION_COOKIE = "gapless_console_session"
LOGIN_COOKIE = "gapless_console_login"
_LOGIN_SECONDS = 3600
_OLD_SESSIONS_SECONDS = 86_400.0
_MAX_PERSON = 100


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Session:
    """A logged-in person: who, through which token (the first hex digits of its
    hash), with what grant, until when."""

    # Never shown: not in a page, a log line, nor this object's repr.
    _session_id: str = field(repr=False)
    person: str
    token_id: str
    grant: Grant
    expires_at: datetime

    @property
    def csrf(self) -> str:
        """This session's CSRF token (the same on every form of the session)."""
        return hmac.new(self._session_id.encode(), b"console-csrf", hashlib.sha256).hexdigest()

    @property
    def session_hash(self) -> str:
        """How the control database knows the session."""
        return _digest(self._session_id)

    def csrf_matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.csrf.encode())

    @property
    def actor(self) -> str:
        """How the modules' own audit (resolutions, commands) names who acted."""
        return f"{self.person} (console)"

    @property
    def tenants(self) -> frozenset[str] | None:
        """The tenants it may see (None: every tenant)."""
        return self.grant.tenants

    def sees(self, tenant_id: str | None) -> bool:
        """Whether it may see something of ``tenant_id`` (None: of no known tenant,
        which only a grant on every tenant sees)."""
        return self.grant.role_on(tenant_id if tenant_id is not None else ALL_TENANTS) is not None

    def may(self, needs: Role, tenant_id: str | None) -> bool:
        role = self.grant.role_on(tenant_id if tenant_id is not None else ALL_TENANTS)
        return role is not None and role >= needs

    def require(self, needs: Role, tenant_id: str | None) -> None:
        """Refuse unless it holds ``needs`` on the tenant: 403 ``TENANT_SCOPE_DENIED``,
        or 403 ``ROLE_DENIED`` naming the role. Something of no known tenant (a
        message that never decoded) needs the role on every tenant (``*``)."""
        where = tenant_id if tenant_id is not None else ALL_TENANTS
        role = self.grant.role_on(where)
        shown = "every tenant ('*')" if tenant_id is None else f"tenant {tenant_id!r}"
        if role is None:
            raise TenantScopeDenied(f"your token may not act on {shown}")
        if role < needs:
            raise RoleDenied(
                f"this needs the {needs.label} role on {shown}; your token is {role.label} there"
            )

    @property
    def highest(self) -> Role:
        return self.grant.highest()


def scope_text(grant: Grant) -> str:
    """A grant as ``GAPLESS_API_TOKENS`` writes it (``t1=operator|*=viewer``)."""
    roles = grant.roles or {}
    return "|".join(f"{tenant}={role.label}" for tenant, role in sorted(roles.items()))


def current_session(request: Request) -> Session:
    """The request's live session (and ``request.state.session`` for the layout), or
    ``SESSION_REQUIRED``."""
    session_id = request.cookies.get(SESSION_COOKIE)
    if not session_id:
        raise SessionRequired("log in first")
    here = console(request)
    with here.control.connection() as conn:
        row = sql.live_session(conn, _digest(session_id))
    if row is None:
        raise SessionRequired("your session has ended (logged out or expired): log in again")
    grant = here.grants.get(row.token_hash)
    if grant is None:
        raise SessionRequired("the token of this session is no longer accepted: log in again")
    session = Session(session_id, row.person, row.token_hash[:8], grant, row.expires_at)
    request.state.session = session
    return session


SessionDep = Annotated[Session, Depends(current_session)]
Csrf = Annotated[str | None, Form()]

router = APIRouter()


def _next(target: str | None) -> str:
    """Where to go after logging in: a path of this console only."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/streams"


@router.get("/login")
def login_page(
    request: Request, next: Annotated[str | None, Query(max_length=2000)] = None
) -> Response:
    """The login form, with its own CSRF token matched by a short-lived cookie."""
    token = secrets.token_urlsafe(24)
    response: Response = render(request, "login.html", {"login_csrf": token, "next": _next(next)})
    _set_cookie(request, response, LOGIN_COOKIE, token, _LOGIN_SECONDS, path="/login")
    return response


def _set_cookie(
    request: Request, response: Response, name: str, value: str, seconds: int, path: str = "/"
) -> None:
    response.set_cookie(
        name,
        value,
        max_age=seconds,
        path=path,
        httponly=True,
        samesite="strict",
        secure=console(request).settings.console_secure_cookie,
    )


def _audit_login(
    here: Console,
    person: str,
    token_id: str,
    outcome: sql.Outcome,
    code: str | None = None,
    detail: str = "",
) -> None:
    with here.control.connection() as conn:
        sql.record_action(
            conn,
            person=person,
            token_id=token_id,
            action="login",
            target=person,
            tenant_id=None,
            reason="",
            outcome=outcome,
            code=code,
            detail=detail,
        )
    here.metrics.actions.labels("login", outcome).inc()


@router.post("/login")
def login(
    request: Request,
    token: Annotated[str, Form(max_length=4096)] = "",
    person: Annotated[str, Form(max_length=1000)] = "",
    login_csrf: Annotated[str, Form(max_length=200)] = "",
    next: Annotated[str, Form(max_length=2000)] = "/streams",
) -> Response:
    """Check the token and open a session: 1. the login form's CSRF token matches its
    cookie; 2. the name is given and the token's hash is configured; 3. record the
    session (and sweep sessions that ended a day ago); 4. audit; 5. set the cookie.
    A crash before 5 leaves a session row no cookie names; it expires unused."""
    here = console(request)
    expected = request.cookies.get(LOGIN_COOKIE, "")
    if not expected or not hmac.compare_digest(expected.encode(), login_csrf.encode()):
        raise CsrfTokenInvalid("the login form has expired: load it again")
    who = person.strip()
    if not who or len(who) > _MAX_PERSON:
        raise FormInvalid(f"give your name (1 to {_MAX_PERSON} characters): it is audited")
    digest = token_hash(token.strip())
    grant = here.grants.get(digest)
    if grant is None:
        _audit_login(here, who, "-", "refused", code=LoginRefused.code, detail="unknown token")
        raise LoginRefused("that token is not accepted here")
    session_id = secrets.token_urlsafe(32)
    ttl = here.settings.console_session_seconds
    with here.control.connection() as conn:
        sql.insert_session(conn, _digest(session_id), who, digest, scope_text(grant), ttl)
        sql.delete_old_sessions(conn, _OLD_SESSIONS_SECONDS)
    _audit_login(here, who, digest[:8], "done", detail=f"grant {scope_text(grant)}")
    log.info("console login of %s (token %s)", who, digest[:8])
    response = RedirectResponse(_next(next), status_code=303)
    _set_cookie(request, response, SESSION_COOKIE, session_id, ttl)
    response.delete_cookie(LOGIN_COOKIE, path="/login")
    return response


@router.post("/logout")
def logout(request: Request, session: SessionDep, csrf: Csrf = None) -> Response:
    here = console(request)
    if not session.csrf_matches(csrf):
        raise CsrfTokenInvalid("this form is not from your session: load the page again")
    with here.control.connection() as conn:
        sql.end_session(conn, session.session_hash)
        sql.record_action(
            conn,
            person=session.person,
            token_id=session.token_id,
            action="logout",
            target=session.person,
            tenant_id=None,
            reason="",
            outcome="done",
        )
    here.metrics.actions.labels("logout", "done").inc()
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


def login_redirect(request: Request) -> Response:
    """A page asked for without a session: to the login form, coming back after. A
    table refreshing in place (htmx's ``HX-Request``) is answered 401 with
    ``HX-Redirect``, so the whole page goes to the login form and comes back to the
    page the table is on, instead of the form landing inside the table."""
    if request.headers.get("HX-Request") == "true":
        shown = urlsplit(request.headers.get("HX-Current-URL", ""))
        page = _next(shown.path + (f"?{shown.query}" if shown.query else ""))
        response = Response(status_code=401, headers={"X-Error-Code": SessionRequired.code})
        response.headers["HX-Redirect"] = f"/login?next={quote(page, safe='')}"
        return response
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
