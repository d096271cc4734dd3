"""The console's ``/metrics``: requests by route and status with their latency, and the
actions taken through it by outcome."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response
from prometheus_client import CollectorRegistry, Counter, Histogram


class ConsoleMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "gapless_console_requests",
            "Requests answered, by method, route and status.",
            ("method", "route", "status"),
            registry=registry,
        )
        self.seconds = Histogram(
            "gapless_console_request_seconds",
            "Time to answer a request, by method and route.",
            ("method", "route"),
            registry=registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
        )
        self.actions = Counter(
            "gapless_console_actions",
            "Actions taken through the console, by action and outcome (done, refused, failed).",
            ("action", "outcome"),
            registry=registry,
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
    """The answering route's template (never the raw path: ids would make a series each)."""
    route = request.scope.get("route")
    if route is None:
        return "unmatched"
    return str(getattr(route, "path_format", None) or getattr(route, "path", "unmatched"))
