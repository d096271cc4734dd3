"""The console's pages, one module each: what the page reads (through the modules the
CLI and the APIs read through) and the actions its forms post."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from db.control import console as sql
from infra.console.auth import Session
from infra.console.resources import console, render


def page(
    request: Request, session: Session, template: str, context: dict[str, Any], status: int = 200
) -> Any:
    """A page for ``session``, with the outcome of the action that redirected here
    (``?audit=<id>``: its audit record, when it is this person's through this token)."""
    done = None
    raw = request.query_params.get("audit", "")
    if raw.isdigit() and len(raw) < 19:
        with console(request).control.connection() as conn:
            record = sql.audit_record(conn, int(raw))
        if record is not None and (record.person, record.token_id) == (
            session.person,
            session.token_id,
        ):
            done = record
    return render(request, template, {"done": done, **context}, status)
