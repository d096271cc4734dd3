"""Capture work waiting on an operator: failed jobs and products
(``producers.capture.worker.repair.open_failures``) and the captures whose artifact
the evidence sweep did not find (``db.resolver.evidence.missing``); retry and skip
as ``gapless captures retry`` and ``gapless captures skip`` do."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Form, Query, Request, Response

from db.repositories import capture_items, capture_jobs
from db.resolver import evidence
from db.unit_of_work import Transaction
from infra.console import inputs
from infra.console.actions import acting, done
from infra.console.auth import Csrf, SessionDep
from infra.console.pages import page
from infra.console.resources import Console, console
from producers.capture.exceptions import JobNotFound, ProductNotFound
from producers.capture.worker.repair import (
    open_failures,
    retry_item,
    retry_job,
    skip_item,
    skip_job,
)
from schemas.http.auth import Role

router = APIRouter()

SHOWN = 500


@router.get("/captures")
def captures_page(
    request: Request, session: SessionDep, tenant: Annotated[str, Query(max_length=300)] = ""
) -> Response:
    here = console(request)
    wanted = inputs.optional_name(tenant, "tenant")
    failures, missing = [], []
    with here.resolver.connection() as conn:
        for failure in open_failures(conn, wanted):
            if session.sees(failure.tenant_id):
                failures.append(failure)
            if len(failures) > SHOWN:
                break
        missing = [
            m for m in evidence.missing(Transaction(conn), wanted) if session.sees(m.tenant_id)
        ]
    context = {
        "failures": failures[:SHOWN],
        "more": len(failures) > SHOWN,
        "missing": missing[:SHOWN],
        "tenant": wanted or "",
        "may_act": {f.handle: session.may(Role.OPERATOR, f.tenant_id) for f in failures},
    }
    response: Response = page(request, session, "captures.html", context)
    return response


def _tenant_of(here: Console, handle: int | uuid.UUID) -> str:
    """The tenant of a failed product (by number) or job (by id)."""
    with here.resolver.connection() as conn:
        tx = Transaction(conn)
        if isinstance(handle, int):
            item = capture_items.by_id(tx, handle)
            if item is None:
                raise ProductNotFound(f"no product #{handle}")
            return item.tenant_id
        job = capture_jobs.get(tx, handle)
        if job is None:
            raise JobNotFound(f"no job {handle}")
        return job.tenant_id


Target = Annotated[str, Form(max_length=100)]
Reason = Annotated[str, Form(max_length=10_000)]


@router.post("/captures/retry")
def retry(
    request: Request,
    session: SessionDep,
    csrf: Csrf = None,
    target: Target = "",
    reason: Reason = "",
) -> Response:
    """Retry a failed product or job now, with fresh budgets (operator)."""
    here = console(request)
    with acting(request, session, csrf, "captures.retry", target[:100]) as act:
        handle = inputs.capture_target(target)
        act.require(Role.OPERATOR, _tenant_of(here, handle))
        act.reason = inputs.reason(reason, required=False)
        with here.resolver.connection() as conn:
            if isinstance(handle, int):
                retry_item(conn, handle, session.actor, act.reason)
                act.detail = f"product #{handle} due now"
            else:
                count = retry_job(conn, handle, session.actor, act.reason)
                act.detail = f"job {handle} due now, {count} failed product(s) re-queued"
    return done(act, "/captures")


@router.post("/captures/skip")
def skip(
    request: Request,
    session: SessionDep,
    csrf: Csrf = None,
    target: Target = "",
    reason: Reason = "",
) -> Response:
    """Give a failed product or job up for good, with a reason (operator)."""
    here = console(request)
    with acting(request, session, csrf, "captures.skip", target[:100]) as act:
        handle = inputs.capture_target(target)
        act.require(Role.OPERATOR, _tenant_of(here, handle))
        act.reason = inputs.reason(reason)
        with here.resolver.connection() as conn:
            if isinstance(handle, int):
                status = skip_item(conn, handle, session.actor, act.reason)
                act.detail = f"product #{handle} skipped; its job is {status}"
            else:
                skip_job(conn, handle, session.actor, act.reason)
                act.detail = f"job {handle} skipped"
    return done(act, "/captures")
