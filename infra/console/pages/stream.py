"""A stream's page: its positions and retention (``producers.retention.report``), its
consumers with their last reports and what each applied (``product_side``), its
leases, its most recent events decoded as ``gapless tail`` shows them
(``infra.tail.event_json``, read from the resolver's retained events), and the
events parked on it with what each waits on (``processors.applier.parked_repair``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response

from db.control import pauses
from db.control.epochs import rewound_now
from infra.console.auth import SessionDep
from infra.console.inputs import name
from infra.console.pages import page
from infra.console.product_side import product_side
from infra.console.resources import Console, console
from infra.tail import event_json, message_headers, message_key
from processors.applier.parked_repair import list_parked
from producers.retention import retained
from producers.retention.exceptions import CursorPruned, StreamNotFound
from producers.retention.report import stream_report
from schemas.codec import EventCodec, kafka_headers
from schemas.exceptions import CodecError
from schemas.http.auth import Role
from schemas.http.params import MAX_ID
from schemas.ids import StreamId

router = APIRouter()

RECENT_EVENTS = 25


@dataclass(frozen=True, slots=True)
class RecentEvent:
    position: int
    record: dict[str, Any] | None
    problem: str | None = None


def decoded(codec: EventCodec, position: int, key: bytes, value: bytes) -> RecentEvent:
    """A retained event as ``gapless tail --json`` prints it, with the headers the
    relay sends it with; it comes from the outbox, not from Kafka, so it has no
    partition, offset or broker timestamp."""
    try:
        event = codec.decode_value(value)
    except CodecError as exc:
        return RecentEvent(position, None, f"{exc.code}: {exc}")
    record = event_json(
        event,
        0,
        0,
        key=message_key(key, codec),
        headers=message_headers(kafka_headers(str(event.event_id), event.history_epoch)),
    )
    for kafka_only in ("partition", "offset", "timestamp"):
        record.pop(kafka_only)
    return RecentEvent(position, record)


def recent_events(
    here: Console, stream: StreamId, committed: int, pruned: int
) -> list[RecentEvent]:
    """The last ``RECENT_EVENTS`` retained events (fewer once pruned)."""
    after = max(pruned, committed - RECENT_EVENTS)
    with here.resolver.connection() as conn:
        try:
            found = retained.live_page(conn, stream, after, RECENT_EVENTS)
        except CursorPruned:  # the pruner passed ``after`` meanwhile: nothing to show
            return []
    return [decoded(here.codec, e.position, e.key, e.value) for e in found.events]


def _read(here: Console, stream: StreamId) -> dict[str, Any]:
    with here.resolver.connection() as conn:
        found = stream_report(conn, stream)
    with here.product.connection() as conn:
        applied = product_side(conn).get(stream, {})
        parked = list_parked(conn, here.settings.agents_consumer, stream)
    if not found and not applied:
        raise StreamNotFound(
            f"no stream {stream.tenant_id}/{stream.catalog_id}@{stream.history_epoch}"
        )
    retention = found[0] if found else None
    with here.control.connection() as conn:
        pause = pauses.open_pause_of(conn, stream.tenant_id, stream.catalog_id)
        rewound = next(
            (
                r
                for r in rewound_now(conn)
                if (r.tenant_id, r.catalog_id, r.history_epoch) == stream
            ),
            None,
        )
    events = (
        recent_events(here, stream, retention.committed, retention.pruned_through)
        if retention
        else []
    )
    return {
        "stream": stream,
        "retention": retention,
        "applied": applied,
        "parked": parked,
        "pause": pause,
        "rewound": rewound,
        "events": events,
    }


Name = Annotated[str, Path(max_length=MAX_ID)]


@router.get("/streams/{tenant_id}/{catalog_id}/{history_epoch}")
def stream_page(
    request: Request,
    session: SessionDep,
    tenant_id: Name,
    catalog_id: Name,
    history_epoch: Annotated[int, Path(ge=0, le=2**62)],
) -> Response:
    session.require(Role.VIEWER, name(tenant_id, "tenant"))
    stream = StreamId(tenant_id, name(catalog_id, "catalog"), history_epoch)
    response: Response = page(request, session, "stream.html", _read(console(request), stream))
    return response
