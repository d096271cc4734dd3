"""Health and Prometheus metrics pages on the Faust web server."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from processors.agents.metrics import ProductCollector

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
    # The product database's state in a registry of this app's own (the process-wide
    # one holds the counters), so a second app in one process registers nothing twice.
    product = CollectorRegistry(auto_describe=False)
    product.register(ProductCollector(product_dsn))

    def exposition() -> bytes:
        return generate_latest(REGISTRY) + generate_latest(product)

    @app.page("/healthz")  # type: ignore[untyped-decorator]
    async def healthz(web: Any, request: Any) -> Any:
        if await asyncio.to_thread(database_answers, product_dsn):
            return web.text("ok\n")
        return web.text("the product database does not answer\n", status=503)

    @app.page("/metrics")  # type: ignore[untyped-decorator]
    async def metrics(web: Any, request: Any) -> Any:
        # The collector queries the database: off the event loop.
        body = await asyncio.to_thread(exposition)
        return web.bytes(body, content_type=CONTENT_TYPE_LATEST)
