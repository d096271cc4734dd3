"""The deployed relay and agents of a bench phase, and the wait for them to apply.

Phases (f) and (g) start ``gapless relay`` and ``gapless agents`` as subprocesses
pointed at the sandbox, on an events topic of the phase's own and, for the agents,
an app id of its own (a consumer group of its own). The agents fill gaps through a
resolver API when given one; without one (phase f) its URL answers nothing, which the
applier does not need while no gap opens.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path

import psycopg

from infra.bench.sandbox import Sandbox, deployed_env
from infra.processes import Deployed, free_port

CONSUMER = "product-applier"
POLL_S = 0.2


def logs_dir() -> Path:
    """Where a bench's deployed processes write their logs."""
    logs = Path(os.environ.get("GAPLESS_LOCAL_DIR", Path.cwd() / ".local")) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    return logs


def relay_and_agents(
    box: Sandbox, topic: str, name: str, resolver_url: str | None = None, probe: str = "readyz"
) -> list[Deployed]:
    """The two processes (not started), named after ``name`` in their logs and app id,
    each waited for on its ``probe`` (``healthz`` where a backlog keeps it unready)."""
    env = deployed_env(box, topic)
    logs = logs_dir()
    relay_port, web_port = free_port(), free_port()
    relay = Deployed(
        "relay",
        ["relay"],
        {**env, "GAPLESS_RELAY_HTTP_PORT": str(relay_port)},
        logs / f"bench-{box.run_id}-{name}-relay.log",
        f"http://127.0.0.1:{relay_port}/{probe}",
    )
    agents = Deployed(
        "agents",
        ["agents"],
        {
            **env,
            "GAPLESS_AGENTS_WEB_PORT": str(web_port),
            "GAPLESS_AGENTS_APP_ID": f"{box.consumer_group}-{name}",
            "GAPLESS_AGENTS_CONSUMER": CONSUMER,
            "GAPLESS_RESOLVER_URL": resolver_url or f"http://127.0.0.1:{free_port()}",
        },
        logs / f"bench-{box.run_id}-{name}-agents.log",
        f"http://127.0.0.1:{web_port}/{probe}",
    )
    return [relay, agents]


def last_applied(
    box: Sandbox, tenant: str, catalog: str, processes: list[Deployed], timeout: float
) -> datetime:
    """Wait until the agents' durable progress in the stream (tenant, catalog) reaches
    the last position written to it; then the start of the transaction that applied
    the last of its events (the inbox's ``decided_at``, the server's clock)."""
    with psycopg.connect(box.databases.resolver_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT max(position) FROM outbox WHERE tenant_id = %s AND catalog_id = %s",
            (tenant, catalog),
        ).fetchone()
    last = int(row[0]) if row and row[0] is not None else 0
    deadline = time.monotonic() + timeout
    with psycopg.connect(box.databases.product_dsn, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT coalesce(max(position), 0) FROM stream_progress WHERE consumer = %s"
                " AND tenant_id = %s AND catalog_id = %s",
                (CONSUMER, tenant, catalog),
            ).fetchone()
            if row is not None and int(row[0]) >= last:
                break
            for p in processes:
                p.require_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the agents did not reach position {last} in {timeout:.0f}s")
            time.sleep(POLL_S)
        applied = conn.execute(
            "SELECT max(decided_at) FROM inbox WHERE consumer = %s AND tenant_id = %s"
            " AND catalog_id = %s",
            (CONSUMER, tenant, catalog),
        ).fetchone()
    if applied is None or applied[0] is None:
        raise RuntimeError(f"no event of {tenant}/{catalog} in the inbox")
    return applied[0]  # type: ignore[no-any-return]
