"""The export endpoints of the resolver API: ask for a snapshot export under a
rebuild lease, and follow it until it is ready."""

from __future__ import annotations

from typing import cast

from fastapi import APIRouter, Request, status

from db.resolver.exports import ExportRow
from producers.exports import export
from producers.exports.http_models import Export, ExportRequest
from producers.exports.runner import ExportRunner
from producers.http.deps import Conn, Res
from producers.retention import leases
from schemas.http.auth import Admin, Viewer
from schemas.http.errors import error_responses
from schemas.http.params import ExportId

router = APIRouter(prefix="/v1", responses=error_responses(401, 403, 422, 503))


def _body(row: ExportRow) -> Export:
    return Export(
        export_id=row.export_id,
        tenant_id=row.stream.tenant_id,
        catalog_id=row.stream.catalog_id,
        history_epoch=row.stream.history_epoch,
        lease_id=row.lease_id,
        status=row.status,
        position=row.position,
        chunks=row.chunks,
        records=row.records,
        manifest_key=row.manifest_key,
        manifest_sha256=row.manifest_sha256,
        error_code=row.error_code,
        error_message=row.error_message,
        created_at=row.created_at,
        heartbeat_at=row.heartbeat_at,
        idle_seconds=row.idle_seconds,
        ready_at=row.ready_at,
    )


@router.post(
    "/exports",
    tags=["exports"],
    summary="Start a snapshot export of the lease's stream (follow it with GET)",
    status_code=status.HTTP_202_ACCEPTED,
    responses=error_responses(404, 410),
)
def start_export(
    caller: Admin, conn: Conn, res: Res, request: Request, body: ExportRequest
) -> Export:
    lease = leases.find(conn, body.lease_id)
    caller.require_tenant(lease.stream.tenant_id)
    pair = (lease.stream.tenant_id, lease.stream.catalog_id)
    current = res.epochs.epochs([pair], refresh=True).get(pair)
    row = export.begin(conn, body.lease_id, f"token:{caller.token_id}", current)
    cast(ExportRunner, request.app.state.exports).submit(row.export_id)
    return _body(row)


@router.get(
    "/exports/{export_id}",
    tags=["exports"],
    summary="An export's state; once ready, its position W and manifest checksum",
    responses=error_responses(404),
)
def get_export(caller: Viewer, conn: Conn, export_id: ExportId) -> Export:
    row = export.find(conn, export_id)
    caller.require_tenant(row.stream.tenant_id)
    return _body(row)
