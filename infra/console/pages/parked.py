"""Parked events of the live consumer (``processors.applier.parked_repair``): each with
what it waits on, filtered by stream and age; retry (each one whose dependencies
are now applied is applied) and skip with a reason, as ``gapless parked`` does."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, Request, Response

from infra.console import inputs
from infra.console.actions import acting, done
from infra.console.auth import Csrf, SessionDep
from infra.console.messages import decoded_message
from infra.console.pages import page, parked_bulk
from infra.console.resources import Console, console
from processors.applier.exceptions import ParkedEventNotFound
from processors.applier.parked_repair import ParkedEvent, list_parked, parked_value, retry, skip
from schemas.http.auth import Role

router = APIRouter()

SHOWN = 500

Text = Annotated[str, Query(max_length=300)]


@router.get("/parked")
def parked_page(
    request: Request, session: SessionDep, stream: Text = "", age: Text = ""
) -> Response:
    here = console(request)
    wanted = inputs.stream(stream)
    older_than = inputs.duration(age)
    with here.product.connection() as conn:
        events = list_parked(conn, here.settings.agents_consumer, wanted, older_than)
    mine = [p for p in events if session.sees(p.stream[0])]
    context = {
        "events": mine[:SHOWN],
        "more": max(0, len(mine) - SHOWN),
        "stream": stream.strip(),
        "age": age.strip(),
        "query": parked_bulk.query_of(stream, age),
        "may_act": {p.event_id: session.may(Role.OPERATOR, p.stream[0]) for p in mine[:SHOWN]},
    }
    response: Response = page(request, session, "parked.html", context)
    return response


def _parked(here: Console, raw: str) -> ParkedEvent:
    event_id = inputs.uuid_of(raw, "an event id")
    with here.product.connection() as conn:
        found = list_parked(conn, here.settings.agents_consumer, event_ids=[event_id])
    if not found:
        raise ParkedEventNotFound(
            f"no parked event {event_id}: it may have been released or set aside"
        )
    return found[0]


@router.get("/parked/{event_id}")
def parked_event_page(request: Request, session: SessionDep, event_id: str) -> Response:
    """One parked event, decoded as ``gapless tail`` shows an event: what it waits on,
    its payload, and the headers the relay sent it with."""
    here = console(request)
    event = _parked(here, event_id)
    session.require(Role.VIEWER, event.stream[0])
    with here.product.connection() as conn:
        value = parked_value(conn, here.settings.agents_consumer, event.event_id)
    if value is None:  # released or set aside since it was listed
        raise ParkedEventNotFound(f"no parked event {event.event_id}: it was released or set aside")
    context = {
        "p": event,
        "message": decoded_message(here.codec, value, event.partition, event.offset),
        "may_act": session.may(Role.OPERATOR, event.stream[0]),
    }
    response: Response = page(request, session, "parked_event.html", context)
    return response


@router.post("/parked/{event_id}/retry")
def retry_parked(
    request: Request, session: SessionDep, event_id: str, csrf: Csrf = None
) -> Response:
    """Look at a parked event again (operator): applied if what it waits on is now."""
    here = console(request)
    with acting(request, session, csrf, "parked.retry", f"event {event_id[:40]}") as act:
        event = _parked(here, event_id)
        act.require(Role.OPERATOR, event.stream[0])
        with here.applier() as applier:
            outcome = retry(applier, [event.event_id])[event.event_id]
        act.detail = f"released, {outcome}" if outcome else "still waiting"
    return done(act, "/parked")


@router.post("/parked/{event_id}/skip")
def skip_parked(
    request: Request,
    session: SessionDep,
    event_id: str,
    csrf: Csrf = None,
    reason: Annotated[str, Form(max_length=10_000)] = "",
) -> Response:
    """Give a parked event up with a reason (operator): it becomes a skipped quarantine
    entry and progress passes it."""
    here = console(request)
    with acting(request, session, csrf, "parked.skip", f"event {event_id[:40]}") as act:
        event = _parked(here, event_id)
        act.require(Role.OPERATOR, event.stream[0])
        act.reason = inputs.reason(reason)
        entry, skipped = skip(
            here.settings.product_dsn,
            here.settings.agents_consumer,
            event.event_id,
            act.reason,
            session.actor,
            here.codec,
        )
        act.detail = f"skipped as quarantine entry #{entry}; stream progress now {skipped.progress}"
    return done(act, "/parked")
