"""Pauses and fences: the open pauses with the processes that acknowledged each
(``db.control.pauses``), the pauses resumed in the last day, the fence runs of the
last 30 days (``db.control.fence_runs``) with each catalog's steps, and the resume of
a pause (admin), as ``gapless resume`` does it (``infra.pause.resume_catalog``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request, Response

from db.control import pauses
from db.control.epochs import current_epochs
from db.control.fence_runs import FenceRun, recent_runs
from db.product import rebuilds
from infra.console import inputs
from infra.console.actions import acting, done
from infra.console.auth import Csrf, Session, SessionDep
from infra.console.exceptions import FormStale
from infra.console.pages import page
from infra.console.resources import Console, console
from infra.fence import pause_id_for, rebuild_id_for
from infra.pause import PauseNotAcknowledged, resume_catalog
from schemas.http.auth import Role

router = APIRouter()

RESUMED_WITHIN_SECONDS = 86_400.0


@dataclass(frozen=True, slots=True)
class PauseView:
    pause: pauses.Pause
    holders: list[pauses.Holder]
    may_resume: bool

    @property
    def acknowledged(self) -> list[pauses.Holder]:
        return [h for h in self.holders if h.acknowledged]

    @property
    def missing(self) -> list[pauses.Holder]:
        return [h for h in self.holders if not h.acknowledged]


@dataclass(frozen=True, slots=True)
class FenceCatalog:
    """Where one catalog of a fence run stands, step by step (``infra.fence``)."""

    tenant_id: str
    catalog_id: str
    superseded_epoch: int
    paused: str  # "held", "resumed", "not paused by the fence"
    epoch_issued: bool
    rebuild: str  # the latest derived rebuild's id and phase, or "not requested"
    resumed: bool


@dataclass(frozen=True, slots=True)
class FenceRunView:
    run: FenceRun
    catalogs: list[FenceCatalog]


def _rebuild_of(conn: Any, consumer: str, tenant: str, catalog: str, epoch: int) -> str:
    """The fence's rebuild at ``epoch``: the one done, else the last derived id asked."""
    done_row = rebuilds.done_since_epoch(conn, consumer, tenant, catalog, epoch)
    if done_row is not None:
        return f"{done_row.rebuild_id} done"
    last = "not requested"
    for attempt in range(100):
        row = rebuilds.get(conn, rebuild_id_for(tenant, catalog, epoch, attempt))
        if row is None:
            break
        last = f"{row.rebuild_id} {row.phase}"
    return last


def fence_runs(here: Console, session: Session) -> list[FenceRunView]:
    """The runs of the last 30 days, each catalog the session may see with its steps."""
    with here.control.connection() as control:
        runs = recent_runs(control)
        wanted = {(t, c) for run in runs for t, c, _ in run.catalogs if session.sees(t)}
        epochs = current_epochs(control, wanted)
        resumed = {
            (t, c, e): pauses.resumed_after_epoch(control, t, c, e + 1) is not None
            for run in runs
            for t, c, e in run.catalogs
            if (t, c) in wanted
        }
        open_ids = {p.pause_id for p in pauses.open_pauses(control)}
    views = []
    with here.product.connection() as product:
        for run in runs:
            catalogs = []
            for t, c, e in run.catalogs:
                if (t, c) not in wanted:
                    continue
                held = pause_id_for(t, c, e) in open_ids
                catalogs.append(
                    FenceCatalog(
                        t,
                        c,
                        e,
                        "held" if held else ("resumed" if resumed[(t, c, e)] else "not held"),
                        epochs.get((t, c), 0) > e,
                        _rebuild_of(product, here.settings.agents_consumer, t, c, e + 1),
                        resumed[(t, c, e)],
                    )
                )
            if catalogs:
                views.append(FenceRunView(run, catalogs))
    return views


@router.get("/pauses")
def pauses_page(request: Request, session: SessionDep) -> Response:
    here = console(request)
    with here.control.connection() as conn:
        current = [
            PauseView(p, pauses.holders(conn, p.pause_id), session.may(Role.ADMIN, p.tenant_id))
            for p in pauses.open_pauses(conn)
            if session.sees(p.tenant_id)
        ]
        resumed = [
            p
            for p in pauses.recently_resumed(conn, RESUMED_WITHIN_SECONDS)
            if session.sees(p.tenant_id)
        ]
    context = {"current": current, "resumed": resumed, "runs": fence_runs(here, session)}
    response: Response = page(request, session, "pauses.html", context)
    return response


Field = Annotated[str, Form(max_length=1000)]


@router.post("/pauses/resume")
def resume(
    request: Request,
    session: SessionDep,
    csrf: Csrf = None,
    tenant: Field = "",
    catalog: Field = "",
    reason: Annotated[str, Form(max_length=10_000)] = "",
) -> Response:
    """Resume a paused catalog (admin): close its pause, announce the RESUME on the
    control topic and wait up to ``GAPLESS_CONSOLE_RESUME_WAIT_SECONDS`` for every live
    process to let it go. The resume stands either way; who has not yet let go is said."""
    here = console(request)
    with acting(request, session, csrf, "pause.resume", f"{tenant}/{catalog}"[:300]) as act:
        tenant_id = inputs.name(tenant, "tenant")
        catalog_id = inputs.name(catalog, "catalog")
        act.require(Role.ADMIN, tenant_id)
        act.reason = inputs.reason(reason)
        try:
            report = resume_catalog(
                here.settings,
                here.settings,
                tenant_id,
                catalog_id,
                session.actor,
                lambda _line: None,
                here.settings.console_resume_wait_seconds,
            )
        except PauseNotAcknowledged as exc:
            act.detail = f"resumed; {exc.message}"
        else:
            if report is None:
                raise FormStale(f"{tenant_id}/{catalog_id} is not paused (any more)")
            act.target = f"pause {report.pause_id} of {tenant_id}/{catalog_id}"
            act.detail = f"resumed; acknowledged by {len(report.holders)} process(es)"
    return done(act, "/pauses")
