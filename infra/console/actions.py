"""Every state-changing request of the console goes through ``acting``: it checks the
form's CSRF token, lets the route check the role on the target's tenant and do the
work through the module that owns it, and then audits the outcome, whatever it was.

An action runs in this order:

1. the CSRF token of the form must be this session's (else ``CSRF_TOKEN_INVALID``);
2. the route parses its input and finds its target's tenant (``FORM_INVALID`` …,
   or the module's not-found code), then ``Acting.require`` checks the role there;
3. the route calls the module that acts (``processors.applier.repair`` …), which
   commits in its own database or publishes on the control topic;
4. the outcome completes that record and is logged.

Between 2 and 3 the action is recorded ``started`` in ``console_audit`` (control
database), before the module acts. Steps 3 and 4 are in different databases, so a
crash between them leaves the record ``started``: the audit shows that the person
set out to act and that nobody saw the outcome, which the module's own state (a
quarantine entry's status, a command on the control topic) tells. Nothing acts
without a record first. A refusal at 1 or 2 changes nothing and is audited as
``refused`` with its code; an error at 3 is audited ``refused`` when the module
refused (it changed nothing) and ``failed`` when a service failed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypedDict

import psycopg
from fastapi import Request
from fastapi.responses import RedirectResponse

from db.control import console as sql
from infra.console.auth import Session
from infra.console.exceptions import CsrfTokenInvalid
from infra.console.resources import console
from infra.control import ControlTopicUnavailable
from processors.applier.exceptions import (
    EntryNotFound,
    EntryNotOpen,
    ParkedEventNotFound,
    SkipReasonRequired,
)
from processors.rebuild.exceptions import RebuildNotFound
from producers.capture.exceptions import (
    JobNotFound,
    NotFailed,
    ProductNotFound,
    ProductNotOpen,
    ReasonRequired,
)
from schemas.errors import GaplessError
from schemas.http.auth import Role

log = logging.getLogger("gapless.console.audit")

# What a module's refusal answers with, where the module (not being HTTP) sets none.
_STATUS: tuple[tuple[type[GaplessError], int], ...] = (
    (EntryNotFound, 404),
    (ParkedEventNotFound, 404),
    (JobNotFound, 404),
    (ProductNotFound, 404),
    (RebuildNotFound, 404),
    (EntryNotOpen, 409),
    (NotFailed, 409),
    (ProductNotOpen, 409),
    (SkipReasonRequired, 422),
    (ReasonRequired, 422),
    (ControlTopicUnavailable, 503),
)


def status_of(exc: GaplessError) -> int:
    """The HTTP status a page answers ``exc`` with."""
    if exc.http_status is not None:
        return exc.http_status
    for cls, status in _STATUS:
        if isinstance(exc, cls):
            return status
    return 400


@dataclass
class Acting:
    """One action under way: what, on what, why; the route fills in the tenant (by
    ``require``) and what came of it (``detail``)."""

    session: Session
    action: str
    target: str
    reason: str = ""
    tenant_id: str | None = None
    detail: str = ""
    audit_id: int | None = None
    checked: bool = field(default=False, repr=False)
    begin: Callable[[Acting], None] | None = field(default=None, repr=False)

    def require(self, needs: Role, tenant_id: str | None) -> None:
        """Step 2: the session must hold ``needs`` on the target's tenant; then the
        action is recorded ``started`` before the route lets the module act."""
        self.tenant_id = tenant_id
        self.session.require(needs, tenant_id)
        self.checked = True
        if self.begin is not None:
            self.begin(self)


class _Fields(TypedDict):
    person: str
    token_id: str
    action: str
    target: str
    tenant_id: str | None
    reason: str


def _fields(act: Acting) -> _Fields:
    """What the audit records of ``act``, beside its outcome, code and detail."""
    return {
        "person": act.session.person,
        "token_id": act.session.token_id,
        "action": act.action,
        "target": act.target,
        "tenant_id": act.tenant_id,
        "reason": act.reason,
    }


def _start(request: Request, act: Acting) -> None:
    """The audit record of an action about to act, ``started`` (completed by
    ``_record``): a console that dies before it knows the outcome leaves it so."""
    fields = _fields(act)
    with console(request).control.connection() as conn:
        act.audit_id = sql.record_action(conn, **fields, outcome="started")


def _record(request: Request, act: Acting, outcome: sql.Outcome, code: str | None) -> None:
    here = console(request)
    fields = _fields(act)
    log.info(
        "console action %s",
        json.dumps({**fields, "outcome": outcome, "code": code, "detail": act.detail}),
    )
    here.metrics.actions.labels(act.action, outcome).inc()
    with here.control.connection() as conn:
        if act.audit_id is not None:
            sql.finish_action(
                conn,
                act.audit_id,
                target=act.target,
                tenant_id=act.tenant_id,
                reason=act.reason,
                outcome=outcome,
                code=code,
                detail=act.detail,
            )
            return
        act.audit_id = sql.record_action(
            conn,
            **fields,
            outcome=outcome,
            code=code,
            detail=act.detail,
        )


@contextmanager
def acting(
    request: Request, session: Session, csrf: str | None, action: str, target: str
) -> Iterator[Acting]:
    """Run the body as the action ``action`` on ``target`` (see the module docstring);
    an error raised in it is audited and raised on to become the error page."""
    act = Acting(session, action, target, begin=lambda started: _start(request, started))
    try:
        if not session.csrf_matches(csrf):
            raise CsrfTokenInvalid("this form is not from your session: load the page again")
        yield act
        assert act.checked, f"{action}: the route never checked the role"
    except GaplessError as exc:
        act.detail = exc.message
        _record(request, act, "refused" if status_of(exc) < 500 else "failed", exc.code)
        raise
    except Exception as exc:
        act.detail = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        down = isinstance(exc, psycopg.OperationalError)  # the page says UNAVAILABLE too
        _record(request, act, "failed", "UNAVAILABLE" if down else "INTERNAL_ERROR")
        raise
    _record(request, act, "done", None)


def done(act: Acting, back: str) -> RedirectResponse:
    """Redirect-after-post: back to the page, which shows the action's audit record."""
    sep = "&" if "?" in back else "?"
    return RedirectResponse(f"{back}{sep}audit={act.audit_id}", status_code=303)
