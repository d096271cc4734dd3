"""Cutover under live load, seen by the read API's clients.

The resolver API, the relay, the agents and the read API run as users run them;
writers commit decisions throughout and two clients read the rebuilt catalog through
the read API without pause (item pages, one item, a search). An operator runs
``gapless rebuild --wait``. Every read must succeed, each response comes from one
generation, a client never goes back to the old generation once it saw the new one
nor sees the live position move backwards, and after the cutover the projection
equals the accepted state row by row and every committed position is applied.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.settings import DatabaseSettings
from infra.demo.projection_check import compare
from infra.demo.workload import run_workload
from infra.processes import Deployed, free_port
from tests.fixtures.waits import wait_for


@dataclass
class Reader:
    """Reads the catalog in a loop; every response's status and ``served_from``."""

    url: str
    token: str
    tenant: str
    catalog: str
    stop: threading.Event
    reads: list[tuple[int, int | None, int | None]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def _get(self, client: httpx.Client, path: str, **params: object) -> dict[str, object] | None:
        base = f"/v1/tenants/{self.tenant}/catalogs/{self.catalog}"
        try:
            response = client.get(base + path, params=params)
        except httpx.HTTPError as exc:
            self.failures.append(f"{path}: {exc!r}")
            return None
        if response.status_code != 200:
            self.failures.append(f"{path}: {response.status_code} {response.text[:200]}")
            self.reads.append((response.status_code, None, None))
            return None
        body: dict[str, object] = response.json()
        served = body["served_from"]
        assert isinstance(served, dict)
        self.reads.append((200, int(served["generation"]), int(served["position"])))
        return body

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=10) as client:
            while not self.stop.is_set():
                cursor: object = None
                while not self.stop.is_set():
                    page = self._get(
                        client, "/items", limit=50, **({"cursor": cursor} if cursor else {})
                    )
                    if page is None:
                        break
                    items = page["items"]
                    assert isinstance(items, list)
                    if items:
                        self._get(client, f"/items/{items[0]['item_id']}")
                    cursor = page["next_cursor"]
                    if cursor is None:
                        break
                self._get(client, "/search", q="lamp", limit=20)


@pytest.fixture()
def load(clean_db: DatabaseSettings) -> Iterator[tuple[str, str, threading.Event]]:
    tenant = f"cut{uuid.uuid4().hex[:6]}"
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    stop = threading.Event()
    thread = threading.Thread(
        target=run_workload,
        args=(pool, epochs, [(tenant, "c1"), (tenant, "c2")], 1_000_000, 2),
        kwargs={"stop": stop, "pace_seconds": 0.05},
        daemon=True,
    )
    thread.start()
    yield tenant, "c1", stop
    stop.set()
    thread.join(60)
    pool.close()
    epochs.close()


def _one(dsn: str, query: str, *params: object) -> object:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query, params).fetchone()
    return row[0] if row else None


@pytest.mark.slow
def test_readers_and_writers_never_notice_the_cutover(
    clean_db: DatabaseSettings,
    topic: str,
    load: tuple[str, str, threading.Event],
    tmp_path: Path,
) -> None:
    tenant, catalog, writers = load
    api_port, read_port, agents_port, relay_port = (free_port() for _ in range(4))
    api_url, read_url = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{read_port}"
    env = dict(
        os.environ,
        GAPLESS_EVENTS_TOPIC=topic,
        GAPLESS_RESOLVER_API_PORT=str(api_port),
        GAPLESS_RESOLVER_URL=api_url,
        GAPLESS_EXPORT_CHUNK_RECORDS="25",
    )
    processes = [
        Deployed("resolver-api", ["resolver-api"], env, tmp_path / "api.log", f"{api_url}/readyz"),
        Deployed(
            "relay",
            ["relay"],
            {**env, "GAPLESS_RELAY_HTTP_PORT": str(relay_port)},
            tmp_path / "relay.log",
            f"http://127.0.0.1:{relay_port}/readyz",
        ),
        Deployed(
            "agents",
            ["agents"],
            {
                **env,
                "GAPLESS_AGENTS_APP_ID": f"cutover-{uuid.uuid4().hex[:8]}",
                "GAPLESS_AGENTS_WEB_PORT": str(agents_port),
                "GAPLESS_AGENTS_REBUILD_INTERVAL_SECONDS": "0.5",
            },
            tmp_path / "agents.log",
            f"http://127.0.0.1:{agents_port}/readyz",
        ),
        Deployed(
            "read-api",
            ["read-api"],
            {**env, "GAPLESS_READ_API_PORT": str(read_port)},
            tmp_path / "read-api.log",
            f"{read_url}/readyz",
        ),
    ]
    stop_reading = threading.Event()
    token = os.environ["GAPLESS_RESOLVER_TOKEN"]
    readers = [Reader(read_url, token, tenant, catalog, stop_reading) for _ in range(2)]
    threads = [threading.Thread(target=r.run, daemon=True) for r in readers]

    def live() -> tuple[int, int]:
        with psycopg.connect(clean_db.product_dsn) as conn:
            row = conn.execute(
                "SELECT position, generation FROM stream_progress"
                " WHERE consumer = 'product-applier' AND tenant_id = %s AND catalog_id = %s",
                (tenant, catalog),
            ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    try:
        for p in processes:
            p.start()
        wait_for(lambda: all(p.health() == 200 for p in processes), "every process", 120)
        wait_for(lambda: live()[0] >= 150, "the first events", 90)
        for t in threads:
            t.start()
        wait_for(lambda: all(len(r.reads) >= 5 for r in readers), "the first reads", 60)
        rebuild = subprocess.run(
            [
                sys.executable,
                "-m",
                "infra.cli",
                "rebuild",
                "--tenant",
                tenant,
                "--catalog",
                catalog,
                "--reason",
                "cutover under load",
                "--wait",
                "--json",
            ],
            env=env,
            capture_output=True,
            timeout=300,
        )
        logs = "\n".join(p.tail() for p in processes)
        assert rebuild.returncode == 0, (rebuild.stdout, rebuild.stderr, logs)
        followed = [json.loads(line) for line in rebuild.stdout.splitlines() if line.strip()]
        phases = [r["phase"] for r in followed[1:]]
        final = followed[-1]
        assert phases[-1] == "done", phases
        assert {"exporting", "loading", "catching_up", "cutting_over"} <= set(final["timings"])
        # each line carries the rebuild's progress; the rows loaded are the export's
        progress = {"rows_total", "progress_fraction", "rate_rows_per_s", "eta_s"}
        assert all(progress <= r.keys() for r in followed[1:])
        assert final["progress_fraction"] == 1.0
        assert final["rows_total"] == final["rows_loaded"] > 0
        generation = int(final["generation"])
        # Reads go on a while after the cutover too.
        count = sum(len(r.reads) for r in readers)
        wait_for(lambda: sum(len(r.reads) for r in readers) >= count + 20, "later reads", 60)
        stop_reading.set()
        for t in threads:
            t.join(30)
        writers.set()
        committed = lambda: _one(  # noqa: E731
            clean_db.resolver_dsn,
            "SELECT position FROM stream_cursor WHERE tenant_id = %s AND catalog_id = %s",
            tenant,
            catalog,
        )
        wait_for(lambda: live()[0] == committed(), "live progress at the cursor", 120)
    finally:
        stop_reading.set()
        for p in reversed(processes):
            p.stop()

    assert live()[1] == generation == 2
    assert final["cutover_pause_ms"] is not None
    for reader in readers:
        assert reader.failures == [], reader.failures[:5]
        generations = [g for _s, g, _p in reader.reads]
        assert set(generations) <= {1, generation}
        # Once a client saw the new generation it never saw the old one again.
        if generation in generations:
            first = generations.index(generation)
            assert all(g == generation for g in generations[first:])
        positions = [p for _s, _g, p in reader.reads if p is not None]
        assert positions == sorted(positions), "the live position went backwards"
    seen = {g for r in readers for _s, g, _p in r.reads}
    assert seen == {1, generation}, seen  # the readers did read across the cutover
    comparison = compare(clean_db.resolver_dsn, clean_db.product_dsn, tenant, generation)
    differences = [d for d in comparison.differences if d.key[1] == catalog]
    assert differences == [], differences[:5]
    other = compare(clean_db.resolver_dsn, clean_db.product_dsn, tenant, 1)
    assert [d for d in other.differences if d.key[1] != catalog] == []
