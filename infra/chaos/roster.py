"""The campaign's processes: how many of each kind (more with ``scale``), the port each
answers on and the environment each runs with."""

from __future__ import annotations

import os
from pathlib import Path

from infra.chaos import lane
from infra.chaos.crashpoints import Ledger
from infra.chaos.fleet import Echo, Fleet
from infra.chaos.services import Private

CONSUMER = "product-applier"
AGENTS_GROUP = "gapless-chaos-agents"
EXPORT_CHUNK_RECORDS = 200
"""The resolver API's chunk size in the campaign: its rebuilds' exports come in
several chunks, so a load has a "between two chunks" for the lane to kill in."""


def build_fleet(
    scale: bool, services: Private, logs: Path, run_id: str, book: Ledger, echo: Echo
) -> Fleet:
    """The campaign's processes, each on its port and logging to ``logs``, everything
    it reaches behind the fault proxy; every agents worker armed for the rebuild lane."""
    fleet = Fleet(echo, book)
    # Two agents workers at least: a rebuild whose worker dies goes on on another.
    counts = {"resolver-api": 1, "relay": 1, "agents": 2, "resolver-worker": 1, "sweep-jobs": 1}
    if scale:
        counts.update(relay=2, agents=3, **{"resolver-worker": 2})
    api_port = services.process_port(0)
    api_url = f"http://127.0.0.1:{api_port}"
    base = {
        **os.environ,
        "GAPLESS_RESOLVER_URL": api_url,
        "GAPLESS_RESOLVER_API_PORT": str(api_port),
        # A job the API could not enqueue (broker away) is the sweeper's after this.
        "GAPLESS_JOB_SWEEP_AFTER_SECONDS": "5",
        "GAPLESS_EXPORT_CHUNK_RECORDS": str(EXPORT_CHUNK_RECORDS),
    }
    index = 1
    for kind, n in counts.items():
        for i in range(1, n + 1):
            name = f"{kind}-{i}"
            port = api_port if kind == "resolver-api" else services.process_port(index)
            if kind != "resolver-api":
                index += 1
            # Everything the processes reach goes through the fault proxy.
            env = services.proxies.environment({**base, **_process_env(kind, name, port)})
            if kind == "agents":
                env.update(lane.environment(book))
            fleet.add(name, [kind], env, logs / f"{run_id}-{name}.log", port)
    return fleet


def _process_env(kind: str, name: str, port: int) -> dict[str, str]:
    if kind == "relay":
        return {"GAPLESS_RELAY_HTTP_PORT": str(port)}
    if kind == "agents":
        return {
            "GAPLESS_AGENTS_WEB_PORT": str(port),
            "GAPLESS_AGENTS_APP_ID": AGENTS_GROUP,
            "GAPLESS_AGENTS_CONSUMER": CONSUMER,
            "GAPLESS_AGENTS_REBUILD_INTERVAL_SECONDS": "0.5",
            "GAPLESS_AGENTS_REPORT_INTERVAL_SECONDS": "1",
            "GAPLESS_AGENTS_GAP_THRESHOLD_SECONDS": "3",
        }
    if kind == "resolver-worker":
        # A killed worker's job waits for its claim to expire; keep that short.
        return {
            "GAPLESS_WORKER_HTTP_PORT": str(port),
            "GAPLESS_WORKER_ID": name,
            "GAPLESS_WORKER_CLAIM_SECONDS": "5",
            "GAPLESS_WORKER_SCAN_INTERVAL_SECONDS": "1",
            "GAPLESS_WORKER_ORPHANED_AFTER_SECONDS": "10",
        }
    if kind == "sweep-jobs":
        return {"GAPLESS_SWEEP_HTTP_PORT": str(port), "GAPLESS_SWEEP_INTERVAL_SECONDS": "1"}
    return {}
