"""Health and Prometheus metrics pages on the Faust web server."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

PROBE_TIMEOUT_SECONDS = 2


def database_answers(dsn: str) -> bool:
    """True when the product database takes a connection and answers a query.

    The applier and the timers reconnect by themselves after a lost connection (with
    jittered backoff); until the database answers again they cannot make progress,
    so the worker reports itself not ready.
    """
    try:
        with psycopg.connect(dsn, connect_timeout=PROBE_TIMEOUT_SECONDS) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


def register(app: Any, product_dsn: str) -> None:
    @app.page("/healthz")  # type: ignore[untyped-decorator]
    async def healthz(web: Any, request: Any) -> Any:
        if await asyncio.to_thread(database_answers, product_dsn):
            return web.text("ok\n")
        return web.text("the product database does not answer\n", status=503)

    @app.page("/metrics")  # type: ignore[untyped-decorator]
    async def metrics(web: Any, request: Any) -> Any:
        return web.bytes(generate_latest(), content_type=CONTENT_TYPE_LATEST)
