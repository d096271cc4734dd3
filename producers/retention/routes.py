"""The retention-control endpoints of the resolver API (DESIGN §6).

Thin: each route authorizes the tenant, then calls one operation of
``producers.retention``; the operations own their transactions and locks.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from producers.http.deps import Conn, Res
from producers.retention import consumers, leases, retained
from producers.retention.exceptions import IncompleteCursor, StreamNotFound, TtlTooLong
from producers.retention.http_models import (
    ConsumerRegistered,
    EventPageBody,
    Lease,
    LeaseAdvance,
    LeaseRenewal,
    LeaseRequest,
    ProgressHeld,
    ProgressReport,
    StreamPage,
    StreamPosition,
    StreamState,
)
from producers.retention.report import stream_page, stream_report
from schemas.http.auth import Admin, Principal, Viewer
from schemas.http.errors import error_responses
from schemas.http.params import (
    MAX_ID,
    MAX_INT8,
    Catalog,
    ConsumerId,
    HistoryEpoch,
    LeaseId,
    Tenant,
)
from schemas.ids import StreamId

router = APIRouter(prefix="/v1", responses=error_responses(401, 403, 422, 503))

After = Annotated[int, Query(ge=0, le=MAX_INT8, description="Return events after this position.")]
Limit = Annotated[int, Query(ge=1, le=retained.MAX_PAGE, description="At most this many events.")]

STREAM = "/streams/{tenant_id}/{catalog_id}/{history_epoch}"
MAX_STREAM_PAGE = 1000
CONSUMER = STREAM + "/consumers/{consumer_id}"


def _stream(caller: Principal, tenant_id: str, catalog_id: str, history_epoch: int) -> StreamId:
    caller.require_tenant(tenant_id)
    return StreamId(tenant_id, catalog_id, history_epoch)


def _current_epoch(res: Res, stream: StreamId) -> int | None:
    """The current epoch of the stream's tenant/catalog, read from the control
    database each time (never the cache): leases and exports are few, and one issued
    a moment ago by a fence must already count."""
    pair = (stream.tenant_id, stream.catalog_id)
    return res.epochs.epochs([pair], refresh=True).get(pair)


def _check_ttl(res: Res, ttl_seconds: int | None) -> None:
    if ttl_seconds is not None and ttl_seconds > res.lease_max_ttl_seconds:
        raise TtlTooLong(f"ttl_seconds may be at most {res.lease_max_ttl_seconds}")


@router.put(CONSUMER, tags=["consumers"], summary="Register a consumer (idempotent)")
def register_consumer(
    caller: Admin,
    conn: Conn,
    tenant_id: Tenant,
    catalog_id: Catalog,
    history_epoch: HistoryEpoch,
    consumer_id: ConsumerId,
) -> ConsumerRegistered:
    stream = _stream(caller, tenant_id, catalog_id, history_epoch)
    registration = consumers.register(conn, stream, consumer_id)
    return ConsumerRegistered(
        tenant_id=tenant_id,
        catalog_id=catalog_id,
        history_epoch=history_epoch,
        consumer_id=consumer_id,
        reported_position=registration.reported_position,
        pruned_through=registration.pruned_through,
    )


@router.delete(
    CONSUMER,
    tags=["consumers"],
    summary="Deregister a consumer (an operator's decision)",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=error_responses(404),
)
def deregister_consumer(
    caller: Admin,
    conn: Conn,
    tenant_id: Tenant,
    catalog_id: Catalog,
    history_epoch: HistoryEpoch,
    consumer_id: ConsumerId,
) -> Response:
    consumers.deregister(conn, _stream(caller, tenant_id, catalog_id, history_epoch), consumer_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    CONSUMER + "/progress",
    tags=["consumers"],
    summary="Report durable progress (monotonic; registers the consumer if needed)",
    responses=error_responses(409),
)
def report_progress(
    caller: Admin,
    conn: Conn,
    res: Res,
    tenant_id: Tenant,
    catalog_id: Catalog,
    history_epoch: HistoryEpoch,
    consumer_id: ConsumerId,
    body: ProgressReport,
) -> ProgressHeld:
    stream = _stream(caller, tenant_id, catalog_id, history_epoch)
    # A report above the committed cursor flags the stream rewound in the control
    # database (409 ``POSITION_BEYOND_COMMITTED`` naming the fence that fixes it).
    held = consumers.report(conn, stream, consumer_id, body.position, res.epochs)
    return ProgressHeld(reported_position=held)


@router.get(
    STREAM + "/events",
    tags=["retained events"],
    summary="Retained events after a position, in order",
    responses=error_responses(410),
)
def stream_events(
    caller: Viewer,
    conn: Conn,
    tenant_id: Tenant,
    catalog_id: Catalog,
    history_epoch: HistoryEpoch,
    after: After = 0,
    limit: Limit = retained.DEFAULT_PAGE,
) -> EventPageBody:
    stream = _stream(caller, tenant_id, catalog_id, history_epoch)
    return EventPageBody.of(retained.live_page(conn, stream, after, limit))


AfterText = Annotated[str | None, Query(min_length=1, max_length=MAX_ID)]
StreamLimit = Annotated[int, Query(ge=1, le=MAX_STREAM_PAGE, description="At most this many.")]


@router.get("/streams", tags=["streams"], summary="The streams the caller may read, in pages")
def list_streams(
    caller: Viewer,
    conn: Conn,
    after_tenant: AfterText = None,
    after_catalog: AfterText = None,
    after_epoch: Annotated[int | None, Query(ge=0, le=MAX_INT8)] = None,
    limit: StreamLimit = MAX_STREAM_PAGE,
) -> StreamPage:
    """Every stream of the caller's tenants that has written or is under retention
    control, with its committed, published and pruned-through positions. A consumer
    learns from it the streams it has never received a message of."""
    given = (after_tenant, after_catalog, after_epoch)
    if any(v is not None for v in given) and any(v is None for v in given):
        raise IncompleteCursor("give after_tenant, after_catalog and after_epoch together")
    after = None
    if after_tenant is not None and after_catalog is not None and after_epoch is not None:
        after = StreamId(after_tenant, after_catalog, after_epoch)
    rows, more = stream_page(conn, caller.grant.tenants, after, limit)
    return StreamPage(streams=[StreamPosition.of(p) for p in rows], more=more)


@router.get(
    STREAM,
    tags=["streams"],
    summary="Retention state: positions, floor and its holder, consumers, leases",
    responses=error_responses(404),
)
def stream_state(
    caller: Viewer, conn: Conn, tenant_id: Tenant, catalog_id: Catalog, history_epoch: HistoryEpoch
) -> StreamState:
    stream = _stream(caller, tenant_id, catalog_id, history_epoch)
    found = stream_report(conn, stream)
    if not found:
        raise StreamNotFound(f"no stream {stream}")
    return StreamState.of(found[0])


@router.post(
    "/leases",
    tags=["leases"],
    summary="Take a rebuild lease pinned at the stream's pruned-through position",
    status_code=status.HTTP_201_CREATED,
    responses=error_responses(410),
)
def create_lease(caller: Admin, conn: Conn, res: Res, body: LeaseRequest) -> Lease:
    stream = _stream(caller, body.tenant_id, body.catalog_id, body.history_epoch)
    _check_ttl(res, body.ttl_seconds)
    leases.require_current_epoch(stream, _current_epoch(res, stream))
    return Lease.of(leases.create(conn, stream, body.holder, body.ttl_seconds))


def _own_lease(caller: Principal, conn: Conn, lease_id: uuid.UUID) -> None:
    caller.require_tenant(leases.find(conn, lease_id).stream.tenant_id)


@router.post(
    "/leases/{lease_id}/renew",
    tags=["leases"],
    summary="Extend a live lease (an expired one cannot be revived)",
    responses=error_responses(404, 410),
)
def renew_lease(
    caller: Admin, conn: Conn, res: Res, lease_id: LeaseId, body: LeaseRenewal | None = None
) -> Lease:
    _own_lease(caller, conn, lease_id)
    ttl = body.ttl_seconds if body else None
    _check_ttl(res, ttl)
    _require_current(conn, res, lease_id)
    return Lease.of(leases.renew(conn, lease_id, ttl))


def _require_current(conn: Conn, res: Res, lease_id: uuid.UUID) -> None:
    """A lease of an epoch that is no longer current (fenced after a restore) is not
    kept alive or moved on: 410 ``EPOCH_NOT_CURRENT``. Its release stays allowed: it
    only lets go of a pin on abandoned history."""
    stream = leases.find(conn, lease_id).stream
    leases.require_current_epoch(stream, _current_epoch(res, stream))


@router.post(
    "/leases/{lease_id}/advance",
    tags=["leases"],
    summary="Move the lease's pin forward (never backwards)",
    responses=error_responses(404, 409, 410),
)
def advance_lease(
    caller: Admin, conn: Conn, res: Res, lease_id: LeaseId, body: LeaseAdvance
) -> Lease:
    _own_lease(caller, conn, lease_id)
    _require_current(conn, res, lease_id)
    return Lease.of(leases.advance(conn, lease_id, body.position))


@router.delete(
    "/leases/{lease_id}",
    tags=["leases"],
    summary="Release a lease (idempotent)",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=error_responses(404),
)
def release_lease(caller: Admin, conn: Conn, lease_id: LeaseId) -> Response:
    _own_lease(caller, conn, lease_id)
    leases.release(conn, lease_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/exports/events",
    tags=["retained events"],
    summary="Retained events after a rebuild's export cursor, under its lease",
    responses=error_responses(404, 409, 410),
)
def export_events(
    caller: Viewer,
    conn: Conn,
    res: Res,
    lease_id: Annotated[uuid.UUID, Query()],
    history_epoch: Annotated[int, Query(ge=1, le=MAX_INT8)],
    after: After = 0,
    limit: Limit = retained.DEFAULT_PAGE,
) -> EventPageBody:
    lease = leases.find(conn, lease_id)
    caller.require_tenant(lease.stream.tenant_id)
    current = _current_epoch(res, lease.stream)
    return EventPageBody.of(
        retained.export_page(conn, lease_id, history_epoch, after, limit, current)
    )
