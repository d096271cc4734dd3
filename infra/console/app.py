"""The console process: app assembly (its composition root).

``create_app`` wires the settings, a connection pool per database, the accepted
tokens, the templates and static files (and htmx, when found), the login and the
pages, the error pages,
the request metrics, the security headers and the probes; ``gapless console``
serves it with uvicorn.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import psycopg
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from infra.console import auth
from infra.console.actions import status_of
from infra.console.assets import install_script
from infra.console.exceptions import SessionRequired
from infra.console.metrics import ConsoleMetrics
from infra.console.pages import (
    audit,
    captures,
    overview,
    parked,
    parked_bulk,
    pauses,
    quarantine,
    rebuilds,
)
from infra.console.pages import stream as stream_page
from infra.console.resources import HERE, Console, render
from infra.console.settings import ConsoleSettings
from schemas.errors import GaplessError
from schemas.tracing import trace_requests

log = logging.getLogger(__name__)

# No script, style or frame from anywhere else, and no inline script or style: the
# one script is htmx served from here (script-src), whose refreshes ask this console
# only (connect-src); no page of the console inside another site's frame; no
# referrer leaving it.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self';"
        " img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _error_page(request: Request, status: int, code: str, message: str) -> Response:
    """Every error as a page with its stable code (also in ``X-Error-Code``)."""
    response: Response = render(
        request, "error.html", {"status": status, "code": code, "message": message}, status
    )
    response.headers["X-Error-Code"] = code
    return response


def _install_errors(app: FastAPI) -> None:
    async def coded(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, GaplessError)
        if isinstance(exc, SessionRequired) and request.method == "GET":
            return auth.login_redirect(request)
        return _error_page(request, status_of(exc), exc.code, exc.message)

    async def invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}" for e in exc.errors()
        )
        return _error_page(request, 422, "FORM_INVALID", problems or "invalid request")

    async def http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        codes = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}
        code = codes.get(exc.status_code, f"HTTP_{exc.status_code}")
        return _error_page(request, exc.status_code, code, str(exc.detail))

    async def unavailable(request: Request, exc: Exception) -> Response:
        log.warning("unavailable: %s", exc)
        return _error_page(request, 503, "UNAVAILABLE", "a database does not answer; try again")

    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return _error_page(request, 500, "INTERNAL_ERROR", "internal error; see the console's log")

    app.add_exception_handler(GaplessError, coded)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http)
    app.add_exception_handler(psycopg.OperationalError, unavailable)  # PoolTimeout is one
    app.add_exception_handler(Exception, unexpected)


def _install_headers(app: FastAPI) -> None:
    @app.middleware("http")
    async def secure(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response


def _install_probes(app: FastAPI, here: Console, registry: CollectorRegistry) -> None:
    @app.get("/healthz", include_in_schema=False)
    def healthz() -> Response:
        """200 while the process runs (liveness)."""
        return Response("ok\n", media_type="text/plain")

    @app.get("/readyz", include_in_schema=False)
    def readyz() -> Response:
        """200 when the three databases answer (readiness)."""
        try:
            for pool in (here.resolver, here.product, here.control):
                with pool.connection(timeout=2) as conn:
                    conn.execute("SELECT 1")
        except psycopg.Error:  # PoolTimeout included
            return Response("a database the console reads does not answer\n", status_code=503)
        return Response("ok\n", media_type="text/plain")

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def create_app(settings: ConsoleSettings) -> FastAPI:
    registry = CollectorRegistry()
    metrics = ConsoleMetrics(registry)
    here = Console.of(settings, metrics)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        here.open()
        try:
            yield
        finally:
            here.close()

    app = FastAPI(
        title="gapless console",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.console = here
    _install_errors(app)
    _install_headers(app)
    metrics.install(app)
    trace_requests(app)  # a span per request when tracing is on
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    install_script(app, here.script)
    for router in (
        auth.router,
        overview.router,
        stream_page.router,
        rebuilds.router,
        pauses.router,
        quarantine.router,
        parked_bulk.router,  # before parked's: /parked/bulk-retry is not an event id
        parked.router,
        captures.router,
        audit.router,
    ):
        app.include_router(router)
    _install_probes(app, here, registry)
    return app
