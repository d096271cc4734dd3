"""A bulk retry of parked events, as a dry run first: ``GET /parked/bulk-retry`` lists
the parked events it would look at again (those matching the filters that the session
may act on, oldest position first, at most ``BULK_LIMIT``) and what each would do now
(released: everything it waits on is applied; or still waiting, on what), changing
nothing. Its confirm posts exactly those ids, and runs only if the same filters
still take exactly them (``FORM_STALE`` otherwise, nothing done)."""

from __future__ import annotations

import uuid
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Query, Request, Response

from infra.console import inputs
from infra.console.actions import acting, done
from infra.console.auth import Csrf, Session, SessionDep
from infra.console.exceptions import FormStale
from infra.console.pages import page
from infra.console.resources import Console, console
from processors.applier.parked_repair import ParkedEvent, list_parked, retry
from schemas.http.auth import Role

router = APIRouter()

BULK_LIMIT = 100
"""Parked events one bulk retry takes at most (the oldest matching)."""

Text = Annotated[str, Query(max_length=300)]


def releasable(event: ParkedEvent) -> bool:
    """Whether everything ``event`` waits on is applied now (a retry releases it)."""
    return all(d.applied is not None and d.applied >= d.revision for d in event.waits_on)


def bulk_choice(
    here: Console, session: Session, stream: str, age: str
) -> tuple[list[ParkedEvent], int]:
    """The parked events a bulk retry with these filters takes, and how many matching
    ones it leaves out (another tenant's, or beyond ``BULK_LIMIT``)."""
    with here.product.connection() as conn:
        matching = list_parked(
            conn, here.settings.agents_consumer, inputs.stream(stream), inputs.duration(age)
        )
    seen = [p for p in matching if session.sees(p.stream[0])]
    mine = [p for p in seen if session.may(Role.OPERATOR, p.stream[0])]
    return mine[:BULK_LIMIT], len(seen) - len(mine[:BULK_LIMIT])


def query_of(stream: str, age: str) -> str:
    return urlencode({k: v.strip() for k, v in (("stream", stream), ("age", age)) if v.strip()})


@router.get("/parked/bulk-retry")
def parked_bulk_dry_run(
    request: Request, session: SessionDep, stream: Text = "", age: Text = ""
) -> Response:
    chosen, left_out = bulk_choice(console(request), session, stream, age)
    context = {
        "chosen": chosen,
        "releasable": {p.event_id: releasable(p) for p in chosen},
        "left_out": left_out,
        "stream": stream.strip(),
        "age": age.strip(),
        "query": query_of(stream, age),
        "limit": BULK_LIMIT,
    }
    response: Response = page(request, session, "parked_bulk.html", context)
    return response


@router.post("/parked/bulk-retry")
def parked_bulk_retry(
    request: Request,
    session: SessionDep,
    csrf: Csrf = None,
    ids: Annotated[str, Form(max_length=BULK_LIMIT * 40)] = "",
    stream: Annotated[str, Form(max_length=300)] = "",
    age: Annotated[str, Form(max_length=40)] = "",
) -> Response:
    """The confirm of a dry run: look again at the parked events it showed (``ids``);
    each whose dependencies are applied now is released and applied."""
    here = console(request)
    with acting(request, session, csrf, "parked.bulk-retry", f"events {ids[:200]}") as act:
        shown = [inputs.uuid_of(i, "an event id") for i in ids.split(",") if i.strip()]
        chosen, _ = bulk_choice(here, session, stream, age)
        if not shown or sorted(shown) != sorted(p.event_id for p in chosen):
            raise FormStale(
                "the parked events this bulk retry would take have changed since its dry"
                " run: look at the dry run again"
            )
        tenants = {p.stream[0] for p in chosen}
        for tenant in tenants:
            act.require(Role.OPERATOR, tenant)
        act.tenant_id = tenants.pop() if len(tenants) == 1 else None
        act.reason = f"bulk retry of {len(chosen)} ({query_of(stream, age) or 'no filter'})"
        act.detail = _retry_all(here, [p.event_id for p in chosen])
    return done(act, f"/parked?{query_of(stream, age)}")


def _retry_all(here: Console, event_ids: list[uuid.UUID]) -> str:
    """Retry them together; what became of them, for the audit."""
    with here.applier() as applier:
        outcomes = retry(applier, event_ids)
    released = [f"{e} {o}" for e, o in outcomes.items() if o]
    waiting = [str(e) for e, o in outcomes.items() if not o]
    return (
        f"{len(released)} released"
        + (f" ({', '.join(released)})" if released else "")
        + f"; {len(waiting)} still waiting"
        + (f" ({', '.join(waiting)})" if waiting else "")
    )
