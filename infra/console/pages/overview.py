"""The overview: every stream the session may see, a page at a time.

Per stream: committed and published positions, each consumer's applied position and
lag (in positions, and in seconds: its oldest unapplied event's age and how long its
progress has not moved), the oldest unpublished row's age, the retention floor and
what holds it, a pause of its catalog, a REWOUND flag, and its parked and
quarantined counts. Filtered by tenant, catalog and a search in ``tenant/catalog``;
paged by keyset (``producers.retention.report.stream_page``), so a page's cost grows
with its size, not with the number of streams (but for the few statements that read
the product side, the pauses and the flags of every stream at once).

``GET /streams/table`` answers the table alone (same filters, same page): the
overview's table asks for it every 5 s and is replaced by it (htmx, when served).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import RedirectResponse

from db.control import pauses
from db.control.epochs import Rewound, rewound_now
from db.control.pauses import Pause
from db.resolver.stream_positions import StreamPositions
from infra.console import inputs
from infra.console.auth import Session, SessionDep
from infra.console.pages import page
from infra.console.product_side import Applied, product_side
from infra.console.resources import Console, console
from producers.retention.report import StreamRetention, stream_page, stream_report
from schemas.http.params import MAX_ID
from schemas.ids import StreamId

router = APIRouter()

Text = Annotated[str, Query(max_length=MAX_ID)]


@dataclass(frozen=True, slots=True)
class ConsumerLine:
    """One consumer of a stream: what it applied (product side) and reported
    (resolver side), and its lag."""

    consumer: str
    applied: int | None
    reported: int | None
    lag: int | None
    waiting_age_s: float | None = None
    unchanged_s: float | None = None
    parked: int = 0
    quarantined: int = 0
    standing: bool = False
    needs_rebuild: bool = False


@dataclass(frozen=True, slots=True)
class StreamLine:
    positions: StreamPositions
    retention: StreamRetention | None
    consumers: list[ConsumerLine] = field(default_factory=list)
    pause: Pause | None = None
    rewound: Rewound | None = None

    @property
    def stream(self) -> StreamId:
        return self.positions.stream

    @property
    def parked(self) -> int:
        return sum(c.parked for c in self.consumers)

    @property
    def quarantined(self) -> int:
        return sum(c.quarantined for c in self.consumers)


@dataclass(frozen=True, slots=True)
class Filters:
    tenant: str | None
    catalog: str | None
    search: str | None
    after: StreamId | None
    limit: int

    def query(self, after: StreamId | None) -> str:
        """The query string of the page after ``after`` with the same filters."""
        parts = [(k, str(v)) for k, v in self.fields().items() if v]
        if after is not None:
            parts += [
                ("after_tenant", after.tenant_id),
                ("after_catalog", after.catalog_id),
                ("after_epoch", str(after.history_epoch)),
            ]
        return urlencode(parts)

    def fields(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant or "",
            "catalog": self.catalog or "",
            "q": self.search or "",
            "limit": self.limit,
        }


def _consumers(
    retention: StreamRetention | None, product: dict[str, Applied]
) -> list[ConsumerLine]:
    """The resolver's registered consumers and the product side's, joined by name."""
    applied = dict(product)
    committed = retention.committed if retention else None
    lines = []
    for c in retention.consumers if retention else []:
        mine = applied.pop(c.consumer_id, Applied())
        lines.append(
            ConsumerLine(
                c.consumer_id,
                mine.position,
                c.reported_position,
                c.lag if mine.position is None or committed is None else committed - mine.position,
                c.waiting_age_s,
                c.unchanged_s,
                mine.parked,
                mine.quarantined,
                c.standing,
                c.needs_rebuild_since is not None,
            )
        )
    for name, mine in applied.items():
        lag = None if mine.position is None or committed is None else committed - mine.position
        lines.append(
            ConsumerLine(name, mine.position, None, lag, None, None, mine.parked, mine.quarantined)
        )
    return sorted(lines, key=lambda line: line.consumer)


def read_page(here: Console, session: Session, filters: Filters) -> tuple[list[StreamLine], bool]:
    """One page of streams and whether more follow: 1. the page's positions (keyset);
    2. each stream's retention report; 3. the product side's consumers; 4. pauses and
    REWOUND flags. Each read is its own (the page is a view, not a snapshot)."""
    tenants = session.tenants
    if filters.tenant is not None:
        tenants = frozenset({filters.tenant} if session.sees(filters.tenant) else ())
    with here.resolver.connection() as conn:
        positions, more = stream_page(
            conn, tenants, filters.after, filters.limit, filters.catalog, filters.search
        )
        reports = {}
        for p in positions:
            found = stream_report(conn, p.stream)
            reports[p.stream] = found[0] if found else None
    with here.product.connection() as conn:
        product = product_side(conn)
    with here.control.connection() as conn:
        paused = {p.key: p for p in pauses.open_pauses(conn)}
        rewound = {(r.tenant_id, r.catalog_id, r.history_epoch): r for r in rewound_now(conn)}
    lines = [
        StreamLine(
            p,
            reports[p.stream],
            _consumers(reports[p.stream], product.get(p.stream, {})),
            paused.get((p.stream.tenant_id, p.stream.catalog_id)),
            rewound.get(p.stream),
        )
        for p in positions
    ]
    return lines, more


def filters_of(
    request: Request,
    tenant: Text = "",
    catalog: Text = "",
    q: Text = "",
    after_tenant: Text = "",
    after_catalog: Text = "",
    after_epoch: Annotated[str, Query(max_length=19)] = "",
    limit: Annotated[int | None, Query(ge=1, le=500)] = None,
) -> Filters:
    """The overview's filters and page from its query (``FORM_INVALID`` for a bad one)."""
    after = None
    if after_tenant or after_catalog or after_epoch:
        after_stream = inputs.stream(f"{after_tenant}/{after_catalog}/{after_epoch}")
        after = StreamId(*after_stream) if after_stream else None
    return Filters(
        inputs.optional_name(tenant, "tenant"),
        inputs.optional_name(catalog, "catalog"),
        q.strip() or None,
        after,
        limit or console(request).settings.console_page_size,
    )


FiltersDep = Annotated[Filters, Depends(filters_of)]


def _context(request: Request, session: Session, filters: Filters) -> dict[str, Any]:
    lines, more = read_page(console(request), session, filters)
    last = lines[-1].stream if lines and more else None
    return {
        "lines": lines,
        "filters": filters,
        "next_query": filters.query(last) if last else None,
        "first_query": filters.query(None),
        "this_query": filters.query(filters.after),
    }


@router.get("/")
def home() -> Response:
    return RedirectResponse("/streams", status_code=303)


@router.get("/streams")
def overview(request: Request, session: SessionDep, filters: FiltersDep) -> Response:
    """Every stream the session may see, with filters and pages."""
    response: Response = page(
        request, session, "overview.html", _context(request, session, filters)
    )
    return response


@router.get("/streams/table")
def overview_table(request: Request, session: SessionDep, filters: FiltersDep) -> Response:
    """The overview's table alone (the same query and page), for a refresh in place."""
    response: Response = page(
        request, session, "streams_table.html", _context(request, session, filters)
    )
    return response
