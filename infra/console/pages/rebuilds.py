"""Rebuilds: those in flight and the recent ones (``db.product.rebuilds``), each with
its phase timeline, rows, rate, ETA (``infra.rebuild_text``), cutover pause and
error; a form to start one and one to cancel one, published on the control topic
exactly as ``gapless rebuild`` and ``gapless rebuild cancel`` publish them
(``infra.control``). ``GET /rebuilds/live`` answers the part of the page that
refreshes itself in place (the request just made, in flight, recent)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request, Response

from db.product import rebuilds as sql
from db.product.rebuilds import ControlAnswer, RebuildRow
from db.tables.rebuilds import FINAL_PHASES, PHASES
from infra import rebuild_text as text
from infra.console import inputs
from infra.console.actions import acting, done
from infra.console.auth import Csrf, Session, SessionDep
from infra.console.exceptions import FormStale
from infra.console.pages import page
from infra.console.resources import Console, console
from infra.control import cancel_command, publish, rebuild_command
from processors.rebuild.exceptions import RebuildNotFound
from processors.rebuild.progress import estimate
from schemas.http.auth import Role

router = APIRouter()

RECENT = 50
_WORKING_PHASES = [p for p in PHASES if p not in FINAL_PHASES]


@dataclass(frozen=True, slots=True)
class Step:
    """One phase of a rebuild's timeline: seconds spent in it (so far, for the
    current one)."""

    phase: str
    seconds: float | None
    current: bool


@dataclass(frozen=True, slots=True)
class RebuildView:
    row: RebuildRow
    progress: str
    rate: str | None
    eta_s: float | None
    timeline: list[Step]
    resolver: dict[str, Any]
    may_cancel: bool

    @property
    def finished(self) -> bool:
        return self.row.phase in FINAL_PHASES


def timeline(row: RebuildRow, now: datetime) -> list[Step]:
    """The working phases in order, with the seconds each took (``timings``) and the
    current one's so far."""
    steps = []
    for phase in _WORKING_PHASES:
        spent = row.timings.get(phase)
        current = row.phase == phase
        if current and row.phase_started_at is not None:
            spent = (spent or 0.0) + max(0.0, (now - row.phase_started_at).total_seconds())
        steps.append(Step(phase, spent, current))
    return steps


def view(here: Console, session: Session, row: RebuildRow, now: datetime) -> RebuildView:
    progress = estimate(row, now)
    rate = (
        f"{progress.rate_rows_s:,.0f} {progress.rate_of}/s"
        if progress.rate_rows_s is not None
        else None
    )
    finished = row.phase in FINAL_PHASES
    return RebuildView(
        row,
        text.progress_text(row, progress),
        rate,
        None if finished else progress.eta_s,
        timeline(row, now),
        {} if finished else text.resolver_side(row, here.resolver.connection),
        not finished and session.may(Role.OPERATOR, row.stream.tenant_id),
    )


def _requested(here: Console, raw: str) -> dict[str, Any] | None:
    """What became of a request just made (``?requested=<id>``): its row, or the
    agents' refusal, or nothing yet."""
    try:
        rebuild_id = uuid.UUID(raw)
    except ValueError:
        return None
    with here.product.connection() as conn:
        row = sql.get(conn, rebuild_id)
        answer: ControlAnswer | None = None if row is not None else sql.answer_of(conn, rebuild_id)
    return {"id": rebuild_id, "row": row, "answer": answer}


def _live(here: Console, session: Session, requested: str) -> dict[str, Any]:
    """What the page's refreshing part shows: the request just made, the rebuilds in
    flight and the recent ones (of the session's tenants)."""
    now = datetime.now(UTC)
    with here.product.connection() as conn:
        unfinished = sql.unfinished(conn)
        recent = sql.recent(conn, RECENT)
    mine = [r for r in unfinished if session.sees(r.stream.tenant_id)]
    running = {r.rebuild_id for r in mine}
    return {
        "in_flight": [view(here, session, r, now) for r in mine],
        "recent": [
            view(here, session, r, now)
            for r in recent
            if r.rebuild_id not in running and session.sees(r.stream.tenant_id)
        ],
        "requested": _requested(here, requested) if requested else None,
    }


Requested = Annotated[str, Query(max_length=40)]


@router.get("/rebuilds")
def rebuilds_page(request: Request, session: SessionDep, requested: Requested = "") -> Response:
    here = console(request)
    context = {
        **_live(here, session, requested),
        "default_consumer": here.settings.agents_consumer,
        "may_start": session.highest >= Role.OPERATOR,
    }
    response: Response = page(request, session, "rebuilds.html", context)
    return response


@router.get("/rebuilds/live")
def rebuilds_live(request: Request, session: SessionDep, requested: Requested = "") -> Response:
    """The page's refreshing part alone (the request, in flight, recent), for a refresh
    in place."""
    response: Response = page(
        request, session, "rebuilds_live.html", _live(console(request), session, requested)
    )
    return response


Field = Annotated[str, Form(max_length=1000)]


@router.post("/rebuilds")
def start_rebuild(
    request: Request,
    session: SessionDep,
    csrf: Csrf = None,
    tenant: Field = "",
    catalog: Field = "",
    consumer: Field = "",
    reason: Annotated[str, Form(max_length=10_000)] = "",
) -> Response:
    """Ask the agents for a rebuild (operator): the REBUILD command on the control
    topic, confirmed by the broker, as ``gapless rebuild`` sends it."""
    here = console(request)
    with acting(request, session, csrf, "rebuild.start", f"{tenant}/{catalog}"[:300]) as act:
        tenant_id = inputs.name(tenant, "tenant")
        catalog_id = inputs.name(catalog, "catalog")
        act.require(Role.OPERATOR, tenant_id)
        act.reason = inputs.reason(reason)
        who = inputs.optional_name(consumer, "consumer") or here.settings.agents_consumer
        command = rebuild_command(tenant_id, catalog_id, session.actor, act.reason, who)
        publish(here.settings.client_config(), command, here.settings.control_topic)
        act.target = f"rebuild {command.command_id} of {tenant_id}/{catalog_id} ({who})"
        act.detail = "requested on the control topic"
    return done(act, f"/rebuilds?requested={command.command_id}")


@router.post("/rebuilds/{rebuild_id}/cancel")
def cancel_rebuild(
    request: Request,
    session: SessionDep,
    rebuild_id: str,
    csrf: Csrf = None,
    reason: Annotated[str, Form(max_length=10_000)] = "",
) -> Response:
    """Cancel an unfinished rebuild (operator on its tenant): the CANCEL command on the
    control topic, as ``gapless rebuild cancel`` sends it."""
    here = console(request)
    with acting(request, session, csrf, "rebuild.cancel", f"rebuild {rebuild_id[:40]}") as act:
        found = inputs.uuid_of(rebuild_id, "a rebuild id")
        with here.product.connection() as conn:
            row = sql.get(conn, found)
        if row is None:
            raise RebuildNotFound(f"no rebuild {found}")
        act.require(Role.OPERATOR, row.stream.tenant_id)
        if row.phase in FINAL_PHASES:
            raise FormStale(f"rebuild {found} has ended ({row.phase}) since the page was made")
        act.reason = inputs.reason(reason)
        command = cancel_command(
            found,
            row.stream.tenant_id,
            row.stream.catalog_id,
            row.consumer,
            session.actor,
            act.reason,
        )
        publish(here.settings.client_config(), command, here.settings.control_topic)
        act.detail = f"cancel requested ({row.phase} when asked)"
    return done(act, "/rebuilds")
