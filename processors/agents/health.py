"""Health and Prometheus metrics pages on the Faust web server."""

from __future__ import annotations

from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest


def register(app: Any) -> None:
    @app.page("/healthz")  # type: ignore[untyped-decorator]
    async def healthz(web: Any, request: Any) -> Any:
        return web.text("ok\n")

    @app.page("/metrics")  # type: ignore[untyped-decorator]
    async def metrics(web: Any, request: Any) -> Any:
        return web.bytes(generate_latest(), content_type=CONTENT_TYPE_LATEST)
