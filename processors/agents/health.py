"""Probes and Prometheus metrics on the Faust web server.

* ``/healthz``, alive: the worker's event loop answers (Faust serves the page from
  it; the timers and the control agent run on the same loop).
* ``/readyz``, ready: the product database answers, and the events consumer runs and
  has joined its group (its partitions, if any, set to their resume offsets).
* ``/metrics``: the process's Prometheus registry and the product database's state
  (parked, quarantined, rebuild progress), read at each scrape off the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
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


def register(app: Any, product_dsn: str, consuming: Callable[[], bool]) -> None:
    """``consuming``: whether the events consumer runs and has joined its group."""
    # The product database's state in a registry of this app's own (the process-wide
    # one holds the counters), so a second app in one process registers nothing twice.
    product = CollectorRegistry(auto_describe=False)
    product.register(ProductCollector(product_dsn))

    def exposition() -> bytes:
        return generate_latest(REGISTRY) + generate_latest(product)

    @app.page("/healthz")  # type: ignore[untyped-decorator]
    async def healthz(web: Any, request: Any) -> Any:
        return web.text("ok\n")

    @app.page("/readyz")  # type: ignore[untyped-decorator]
    async def readyz(web: Any, request: Any) -> Any:
        if not await asyncio.to_thread(database_answers, product_dsn):
            return web.text("the product database does not answer\n", status=503)
        if not consuming():
            return web.text("the events consumer has not joined its group\n", status=503)
        return web.text("ready\n")

    @app.page("/metrics")  # type: ignore[untyped-decorator]
    async def metrics(web: Any, request: Any) -> Any:
        # The collector queries the database: off the event loop.
        body = await asyncio.to_thread(exposition)
        # In a header: aiohttp refuses a content_type argument naming a charset.
        return web.bytes(body, headers={"Content-Type": CONTENT_TYPE_LATEST})
