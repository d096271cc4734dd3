"""The resolver API process: app assembly (its composition root).

``create_app`` wires settings, the resolver connection pool, the control-database
epoch source, bearer-token authentication, the error format and the routers;
``gapless resolver-api`` serves it with uvicorn.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from psycopg_pool import ConnectionPool

from db.epochs import EpochSource
from producers.deps import Res, Resources
from producers.errors import ErrorBody, error_response, install_error_handlers
from producers.resolver.exceptions import DomainError
from producers.retention.exceptions import RetentionError
from producers.retention.metrics import RetentionCollector
from producers.retention.routes import router as retention_router
from producers.settings import ApiSettings

DESCRIPTION = """\
The resolver's HTTP API. Every request carries `Authorization: Bearer <token>`; a
token may act on the tenants it is scoped to (`GAPLESS_API_TOKENS`). Every error
answers `{"code": "...", "message": "..."}` with a stable code: `UNAUTHENTICATED`
(401), `TENANT_SCOPE_DENIED` (403), `*_NOT_FOUND` (404), `VALIDATION_FAILED` (422),
`CURSOR_PRUNED`, `LEASE_EXPIRED`, `LEASE_RELEASED`, `EPOCH_NOT_CURRENT` (410), …
"""


def create_app(settings: ApiSettings) -> FastAPI:
    pool = ConnectionPool(
        settings.resolver_dsn,
        min_size=1,
        max_size=settings.api_pool_size,
        kwargs={"autocommit": True},
        open=False,
        name="resolver-api",
    )
    epochs = EpochSource(settings.control_dsn)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        pool.open()
        try:
            yield
        finally:
            pool.close()
            epochs.close()

    app = FastAPI(
        title="gapless resolver API",
        version="1",
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.grants = settings.grants()
    app.state.resources = Resources(pool, epochs, settings.lease_max_ttl_seconds)
    install_error_handlers(
        app,
        coded=(RetentionError, DomainError),
        unavailable=(psycopg.OperationalError,),  # PoolTimeout is one too
    )
    app.include_router(retention_router)

    registry = CollectorRegistry()
    registry.register(RetentionCollector(pool.connection))

    @app.get("/healthz", tags=["operations"], responses={503: {"model": ErrorBody}})
    def healthz(res: Res) -> Response:
        """200 when the resolver database answers."""
        try:
            with res.pool.connection(timeout=2) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:  # PoolTimeout included
            return error_response(503, "UNAVAILABLE", "the resolver database does not answer")
        return Response("ok\n", media_type="text/plain")

    @app.get("/metrics", tags=["operations"], response_class=Response)
    def metrics() -> Response:
        """Prometheus metrics: retention positions, consumer lag, lease expiry."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
