"""The product read API process: app assembly (its composition root).

``create_app`` wires the settings, the product-database pool of snapshot
connections, the control-database epoch source, bearer-token authentication (the
same ``GAPLESS_API_TOKENS`` as the resolver API; every read needs the viewer role on
the tenant in its path), the error format, the routes and the request metrics;
``gapless read-api`` serves it with uvicorn.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import cast

import psycopg
from fastapi import FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from db.control.epochs import EpochSource
from processors.serving.metrics import RequestMetrics
from processors.serving.routes import router
from processors.serving.snapshot import SnapshotReader, snapshot_pool
from processors.settings import ReadApiSettings
from schemas.http.errors import ErrorBody, error_response, install_error_handlers
from schemas.tracing import trace_requests

DESCRIPTION = """\
The product read API: the catalog as the product projections hold it. Every request
carries `Authorization: Bearer <token>` (`GAPLESS_API_TOKENS`, as for the resolver
API) and needs the `viewer` role on the tenant in its path.

Every response is read in one `REPEATABLE READ READ ONLY` transaction from the
generation that serves the catalog (the one the live consumer's progress row
names), and says which in `served_from` (history epoch, generation, position): one
response never mixes two generations, and a generation a rebuild is still loading is
never served. Lists are paged with an opaque `cursor` (the previous page's
`next_cursor`); each page is read from the generation serving at the time.

Every error answers `{"code": "...", "message": "..."}` with a stable code:
`CURSOR_INVALID` (400), `UNAUTHENTICATED` (401), `TENANT_SCOPE_DENIED`,
`ROLE_DENIED` (403), `CATALOG_NOT_SERVED` (404: the catalog has no history yet, or
nothing of it has been applied), `PRODUCT_ITEM_NOT_FOUND`, `NOT_FOUND` (404),
`VALIDATION_FAILED` (422), `UNAVAILABLE`, `STREAM_BEING_RESTORED` (503: the catalog
is paused while it is restored; try again after `Retry-After`).
"""


def create_app(settings: ReadApiSettings) -> FastAPI:
    pool = snapshot_pool(settings.product_dsn, settings.read_api_pool_size, "read-api")
    epochs = EpochSource(settings.control_dsn)
    pauses = settings.pause_watch("read-api")

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        pool.open()
        pauses.start()
        try:
            yield
        finally:
            pauses.stop()
            pool.close()
            epochs.close()

    app = FastAPI(
        title="gapless product read API",
        version="1",
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.grants = settings.grants()
    app.state.reader = SnapshotReader(pool, epochs, settings.agents_consumer, pauses)
    install_error_handlers(
        app,
        unavailable=(psycopg.OperationalError,),  # PoolTimeout is one
        bad_values=(psycopg.DataError,),
    )
    app.include_router(router)

    registry = CollectorRegistry()
    RequestMetrics(registry).install(app)
    trace_requests(app)  # a span per request when tracing is on

    @app.get("/healthz", tags=["operations"], response_class=Response)
    def healthz() -> Response:
        """200 while the process runs (liveness)."""
        return Response("ok\n", media_type="text/plain")

    @app.get("/readyz", tags=["operations"], responses={503: {"model": ErrorBody}})
    def readyz(request: Request) -> Response:
        """200 when the product and control databases answer (readiness)."""
        reader = cast(SnapshotReader, request.app.state.reader)
        try:
            with reader.pool.connection(timeout=2) as conn:
                conn.execute("SELECT 1")
            with psycopg.connect(settings.control_dsn, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:  # PoolTimeout included
            return error_response(503, "UNAVAILABLE", "a database the reads need does not answer")
        return Response("ok\n", media_type="text/plain")

    @app.get("/metrics", tags=["operations"], response_class=Response)
    def metrics() -> Response:
        """Prometheus metrics: requests by route and status, and their latency."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
