"""The audit: every action taken through the console (who, when, what, on what, why,
and how it ended), newest first, a page at a time (``db.control.console``). A session
sees the records about its tenants and its own token's."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from db.control import console as sql
from infra.console.auth import SessionDep
from infra.console.pages import page
from infra.console.resources import console

router = APIRouter()


@router.get("/audit")
def audit_page(
    request: Request,
    session: SessionDep,
    before: Annotated[int | None, Query(ge=1, le=2**62)] = None,
) -> Response:
    here = console(request)
    with here.control.connection() as conn:
        records, more = sql.audit_page(
            conn, session.tenants, session.token_id, before, here.settings.console_page_size
        )
    context = {"records": records, "older": records[-1].id if records and more else None}
    response: Response = page(request, session, "audit.html", context)
    return response
