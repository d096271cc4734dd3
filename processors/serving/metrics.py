"""Request counts and latency of the read API, for ``/metrics``."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response
from prometheus_client import CollectorRegistry, Counter, Histogram


class RequestMetrics:
    """Counts and times every request by method, route template (never the raw
    path: ids would make a series each) and status."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "gapless_read_api_requests",
            "Requests answered, by method, route and status.",
            ("method", "route", "status"),
            registry=registry,
        )
        self.seconds = Histogram(
            "gapless_read_api_request_seconds",
            "Time to answer a request, by method and route.",
            ("method", "route"),
            registry=registry,
            buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
        )

    def install(self, app: FastAPI) -> None:
        @app.middleware("http")
        async def measure(
            request: Request, call_next: Callable[[Request], Awaitable[Response]]
        ) -> Response:
            started = time.perf_counter()
            status = 500
            try:
                response = await call_next(request)
                status = response.status_code
                return response
            finally:
                route = _template(request)
                self.seconds.labels(request.method, route).observe(time.perf_counter() - started)
                self.requests.labels(request.method, route, str(status)).inc()


def _template(request: Request) -> str:
    """The template of the route that answered (routing records it in the scope);
    ``unmatched`` for a path no route has."""
    route = request.scope.get("route")
    if route is None:
        return "unmatched"
    return str(getattr(route, "path_format", None) or getattr(route, "path", "unmatched"))
