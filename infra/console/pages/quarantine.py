"""Quarantine: the entries (``processors.applier.repair``) with filters by status,
code, stream and age; one entry opened decoded (payload, key, headers, error code
and message); retry, skip with a reason, and a bulk retry that first shows its dry
run (``GET /quarantine/bulk-retry``: what would be retried, nothing done) and runs
only on that page's confirm, and only if what it would retry is still the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, Query, Request, Response

from infra.console import inputs
from infra.console.actions import acting, done
from infra.console.auth import Csrf, Session, SessionDep
from infra.console.exceptions import FormStale
from infra.console.messages import decoded_message
from infra.console.pages import page
from infra.console.resources import Console, console
from processors.applier.exceptions import EntryNotFound, QuarantineRepairError
from processors.applier.repair import Entry, list_entries, read_entry, retry, skip_entry
from schemas.http.auth import Role

router = APIRouter()

SHOWN = 500
"""Entries one page lists at most."""
BULK_LIMIT = 100
"""Entries one bulk retry takes at most (the oldest matching)."""
STATUSES = ("open", "retried", "skipped", "superseded", "all")


@dataclass(frozen=True, slots=True)
class Filters:
    status: str
    code: str | None
    stream: tuple[str, str, int] | None
    older_than: timedelta | None

    def matches(self, entry: Entry, now: datetime) -> bool:
        return (
            (self.code is None or entry.error_code.startswith(self.code))
            and (self.stream is None or entry.stream == self.stream)
            and (self.older_than is None or now - entry.created_at >= self.older_than)
        )

    def fields(self) -> dict[str, str]:
        return {
            "status": self.status,
            "code": self.code or "",
            "stream": "/".join(map(str, self.stream)) if self.stream else "",
            "age": _age_text(self.older_than),
        }

    def query(self) -> str:
        return urlencode({k: v for k, v in self.fields().items() if v})


def _age_text(age: timedelta | None) -> str:
    return "" if age is None else f"{age.total_seconds():g}s"


Text = Annotated[str, Query(max_length=300)]


def filters_of(
    status: Text = "open", code: Text = "", stream: Text = "", age: Text = ""
) -> Filters:
    if status not in STATUSES:
        status = "open"
    return Filters(status, code.strip() or None, inputs.stream(stream), inputs.duration(age))


FiltersDep = Annotated[Filters, Depends(filters_of)]


def tenant_of(entry: Entry) -> str | None:
    """The entry's tenant; None for a message that never decoded (no stream known)."""
    return entry.stream[0] if entry.stream else None


def listed(here: Console, session: Session, filters: Filters) -> list[Entry]:
    """The entries the session may see that match, oldest first."""
    with here.product.connection() as conn:
        entries = list_entries(conn, None if filters.status == "all" else filters.status)
    now = datetime.now(UTC)
    return [e for e in entries if session.sees(tenant_of(e)) and filters.matches(e, now)]


@router.get("/quarantine")
def quarantine_page(request: Request, session: SessionDep, filters: FiltersDep) -> Response:
    entries = listed(console(request), session, filters)
    context = {
        "entries": entries[:SHOWN],
        "more": max(0, len(entries) - SHOWN),
        "filters": filters,
        "codes": sorted({e.error_code for e in entries}),
        "may_act": {e.id: session.may(Role.OPERATOR, tenant_of(e)) for e in entries[:SHOWN]},
    }
    response: Response = page(request, session, "quarantine.html", context)
    return response


def decoded(here: Console, entry: Entry, key: bytes | None, value: bytes | None) -> dict[str, Any]:
    """The entry's message decoded (``decoded_message``)."""
    return decoded_message(here.codec, value, entry.partition, entry.offset, key)


@router.get("/quarantine/bulk-retry")
def bulk_dry_run(request: Request, session: SessionDep, filters: FiltersDep) -> Response:
    """The dry run of a bulk retry: the open entries it would retry (those matching
    that the session may act on, oldest first, at most ``BULK_LIMIT``). Changes
    nothing; its confirm form posts exactly these ids."""
    chosen, left_out = bulk_choice(console(request), session, filters)
    context = {"chosen": chosen, "left_out": left_out, "filters": filters, "limit": BULK_LIMIT}
    response: Response = page(request, session, "quarantine_bulk.html", context)
    return response


def bulk_choice(here: Console, session: Session, filters: Filters) -> tuple[list[Entry], int]:
    """The open entries a bulk retry with ``filters`` takes, and how many matching
    ones it leaves out (another tenant's, or beyond ``BULK_LIMIT``)."""
    open_filters = Filters("open", filters.code, filters.stream, filters.older_than)
    matching = listed(here, session, open_filters)
    mine = [e for e in matching if session.may(Role.OPERATOR, tenant_of(e))]
    return mine[:BULK_LIMIT], len(matching) - len(mine[:BULK_LIMIT])


@router.get("/quarantine/{entry_id}")
def entry_page(request: Request, session: SessionDep, entry_id: str) -> Response:
    here = console(request)
    number = inputs.entry_id(entry_id)
    with here.product.connection() as conn:
        found = read_entry(conn, number)
    if found is None:
        raise EntryNotFound(f"no quarantine entry {number}")
    entry, message = found
    session.require(Role.VIEWER, tenant_of(entry))
    context = {
        "entry": entry,
        "message": decoded(here, entry, message.key, message.value),
        "may_act": entry.status == "open" and session.may(Role.OPERATOR, tenant_of(entry)),
    }
    response: Response = page(request, session, "quarantine_entry.html", context)
    return response


def _entry_for_action(here: Console, number: int) -> Entry:
    with here.product.connection() as conn:
        found = read_entry(conn, number)
    if found is None:
        raise EntryNotFound(f"no quarantine entry {number}; see the quarantine page")
    return found[0]


@router.post("/quarantine/{entry_id}/retry")
def retry_entry(
    request: Request, session: SessionDep, entry_id: str, csrf: Csrf = None
) -> Response:
    """Apply the entry's message again (operator), as ``gapless quarantine retry``."""
    here = console(request)
    with acting(request, session, csrf, "quarantine.retry", f"entry #{entry_id[:20]}") as act:
        number = inputs.entry_id(entry_id)
        act.require(Role.OPERATOR, tenant_of(_entry_for_action(here, number)))
        with here.applier() as applier:
            applied = retry(here.settings.product_dsn, applier, number, session.actor)
        act.detail = "applied, marked retried" if applied else "still failing, left open"
    return done(act, f"/quarantine/{number}")


Reason = Annotated[str, Form(max_length=10_000)]


@router.post("/quarantine/{entry_id}/skip")
def skip(
    request: Request, session: SessionDep, entry_id: str, csrf: Csrf = None, reason: Reason = ""
) -> Response:
    """Give the entry's event up with a reason (operator), as ``gapless quarantine skip``:
    progress passes it; what waited on it becomes entries of its own."""
    here = console(request)
    with acting(request, session, csrf, "quarantine.skip", f"entry #{entry_id[:20]}") as act:
        number = inputs.entry_id(entry_id)
        act.require(Role.OPERATOR, tenant_of(_entry_for_action(here, number)))
        act.reason = inputs.reason(reason)
        skipped = skip_entry(
            here.settings.product_dsn, number, act.reason, session.actor, here.codec
        )
        aside = ", ".join(f"#{i}" for i in skipped.set_aside.values())
        act.detail = (
            "skipped"
            + (f"; stream progress now {skipped.progress}" if skipped.progress is not None else "")
            + (f"; set aside what waited on it as entries {aside}" if aside else "")
        )
    return done(act, f"/quarantine/{number}")


@router.post("/quarantine/bulk-retry")
def bulk_retry(
    request: Request,
    session: SessionDep,
    csrf: Csrf = None,
    ids: Annotated[str, Form(max_length=BULK_LIMIT * 20)] = "",
    status: Annotated[str, Form(max_length=20)] = "open",
    code: Annotated[str, Form(max_length=300)] = "",
    stream: Annotated[str, Form(max_length=300)] = "",
    age: Annotated[str, Form(max_length=40)] = "",
) -> Response:
    """The confirm of a dry run: retry the entries it showed (``ids``), only if the
    same filters still take exactly those (``FORM_STALE`` otherwise, nothing done)."""
    here = console(request)
    with acting(request, session, csrf, "quarantine.bulk-retry", f"entries {ids[:200]}") as act:
        filters = filters_of(status, code, stream, age)
        shown = [inputs.entry_id(i) for i in ids.split(",") if i.strip()]
        chosen, _ = bulk_choice(here, session, filters)
        if not shown or sorted(shown) != sorted(e.id for e in chosen):
            raise FormStale(
                "the entries this bulk retry would take have changed since its dry run:"
                " look at the dry run again"
            )
        tenants = {tenant_of(e) for e in chosen}
        for tenant in tenants:
            act.require(Role.OPERATOR, tenant)
        act.tenant_id = tenants.pop() if len(tenants) == 1 else None
        act.reason = f"bulk retry of {len(chosen)} ({filters.query() or 'no filter'})"
        act.detail = _retry_all(here, session, [e.id for e in chosen])
    return done(act, f"/quarantine?{filters.query()}")


def _retry_all(here: Console, session: Session, numbers: list[int]) -> str:
    """Retry each entry in turn; what became of each, for the audit."""
    applied: list[str] = []
    still: list[str] = []
    refused: list[str] = []
    with here.applier() as applier:
        for number in numbers:
            try:
                ok = retry(here.settings.product_dsn, applier, number, session.actor)
            except QuarantineRepairError as exc:  # another operator's repair came first
                refused.append(f"#{number} {exc.code}")
                continue
            (applied if ok else still).append(f"#{number}")
    return (
        f"{len(applied)} applied and marked retried"
        + (f" ({', '.join(applied)})" if applied else "")
        + f"; {len(still)} still failing, left open"
        + (f" ({', '.join(still)})" if still else "")
        + (f"; refused: {', '.join(refused)}" if refused else "")
    )
