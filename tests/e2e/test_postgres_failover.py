"""The resolver's PostgreSQL primary dies under load; its synchronous standby takes
over, and nothing acknowledged is lost.

A private formation (``infra.chaos.cluster.pg_formation``): a primary and a
synchronous standby under pg_auto_failover. The resolver API, the relay and the agents
run as deployed processes against it through multi-host DSNs
(``target_session_attrs=read-write``); reviewers decide cases through the API. Then
the primary's keeper and postmaster are SIGKILLed together and the monitor promotes the
standby. Meanwhile writes are refused with 503 and a code, and nothing exits; then
writes are accepted again without a restart (``failover_s``: from the kill to the
first accepted decision). The old primary rejoins as a standby. At the end: every
decision the API acknowledged is in the resolver, the stream's positions are
contiguous, each applied once, and the projection equals the resolver's state.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.unit_of_work import UnitOfWork
from infra.chaos.cluster import pg_formation
from infra.chaos.services import port_base
from infra.local import postgres, postgres_ha
from infra.local.layout import Layout
from infra.processes import Deployed, free_port
from producers.resolver.catalog_items import ItemChange
from producers.resolver.review_cases import open_case
from schemas.codec import CODEC
from tests.fixtures.decisions import accept
from tests.fixtures.waits import wait_for

pytestmark = pytest.mark.slow

TENANT, CATALOG = "fo-1", "c1"
ITEMS = [f"i{n}" for n in range(5)]
EVIDENCE = [{"capture_id": "failover", "locator": "$.listing"}]


@pytest.fixture()
def formation(services: dict[str, str]) -> Iterator[Layout]:
    """After ``services``: the API's tokens, the broker and the object store are the
    suite's; only PostgreSQL is the formation."""
    with pg_formation(print, port_base(), "sync", "pg-failover-test") as layout:
        yield layout


def _dsns(layout: Layout) -> dict[str, str]:
    ha = postgres_ha.dsn
    return {
        "GAPLESS_RESOLVER_DSN": ha(layout, "resolver", postgres.APP_LOGIN),
        "GAPLESS_RESOLVER_MIGRATION_DSN": ha(layout, "resolver"),
        "GAPLESS_PRODUCT_DSN": ha(layout, "product"),
        "GAPLESS_CONTROL_DSN": ha(layout, "control"),
    }


@dataclass
class Reviewers:
    """Open a case in process, decide it through the API; until stopped."""

    api_url: str
    token: str
    resolver_dsn: str
    control_dsn: str
    acknowledged: list[str] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    accepted_at: list[float] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # the test sees it in ``unexpected``
            self.unexpected.append(repr(exc))

    def _run(self) -> None:
        pool = ConnectionPool(self.resolver_dsn, min_size=1, max_size=1, open=True)
        epochs = EpochSource(self.control_dsn)
        headers = {"Authorization": f"Bearer {self.token}"}
        listing = 0
        try:
            with httpx.Client(base_url=self.api_url, headers=headers, timeout=15) as http:
                while not self.stop.wait(0.02):
                    case = f"case-{uuid.uuid4().hex[:12]}"
                    try:
                        with UnitOfWork(pool, epochs, CODEC) as uow:
                            open_case(uow, TENANT, CATALOG, case, "listing", case)
                            uow.commit()
                    except psycopg.Error:
                        self.refused["case not opened (no primary)"] += 1
                        continue
                    listing += 1
                    self._decide(http, case, f"L{listing}", ITEMS[listing % len(ITEMS)])
        finally:
            pool.close()
            epochs.close()

    def _decide(self, http: httpx.Client, case: str, listing: str, item: str) -> None:
        body = {
            "actor": "reviewer:failover",
            "rationale": "the listing shows this product",
            "evidence": EVIDENCE,
            "expected_revision": 1,
            "action": "map",
            "facts": [{"kind": "map_listing", "listing_id": listing, "item_id": item}],
        }
        path = f"/v1/tenants/{TENANT}/catalogs/{CATALOG}/review-cases/{case}/decisions"
        try:
            response = http.post(path, json=body)
        except httpx.TransportError as exc:
            self.unexpected.append(f"{case}: {exc!r}")
            return
        if response.status_code == 201:
            self.acknowledged.append(case)
            self.accepted_at.append(time.monotonic())
        elif response.status_code == 503:
            self.refused[str(response.json().get("code"))] += 1
        else:
            self.unexpected.append(f"{case}: {response.status_code} {response.text}")


def _processes(env: dict[str, str], logs: Path) -> list[Deployed]:
    api_port, relay_port, agents_port = free_port(), free_port(), free_port()
    api = f"http://127.0.0.1:{api_port}"
    env = {**env, "GAPLESS_RESOLVER_API_PORT": str(api_port), "GAPLESS_RESOLVER_URL": api}
    return [
        Deployed("resolver-api", ["resolver-api"], env, logs / "api.log", f"{api}/readyz"),
        Deployed(
            "relay",
            ["relay"],
            {**env, "GAPLESS_RELAY_HTTP_PORT": str(relay_port)},
            logs / "relay.log",
            f"http://127.0.0.1:{relay_port}/readyz",
        ),
        Deployed(
            "agents",
            ["agents"],
            {
                **env,
                "GAPLESS_AGENTS_APP_ID": f"failover-{uuid.uuid4().hex[:8]}",
                "GAPLESS_AGENTS_WEB_PORT": str(agents_port),
            },
            logs / "agents.log",
            f"http://127.0.0.1:{agents_port}/readyz",
        ),
    ]


def _rows(dsn: str, query: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query, (TENANT,)).fetchall()


def test_a_primary_killed_under_load_loses_nothing_acknowledged(
    formation: Layout, tmp_path: Path
) -> None:
    topic = f"test.events.{uuid.uuid4().hex[:12]}"
    env = {**os.environ, **_dsns(formation), "GAPLESS_EVENTS_TOPIC": topic}
    migrated = Deployed("migrate", ["migrate", "--no-local"], env, tmp_path / "migrate.log", None)
    migrated.start()
    assert migrated.popen is not None and migrated.popen.wait(180) == 0, migrated.tail()
    dsns = _dsns(formation)
    pool = ConnectionPool(dsns["GAPLESS_RESOLVER_DSN"], min_size=1, max_size=1, open=True)
    epochs = EpochSource(dsns["GAPLESS_CONTROL_DSN"])
    try:
        with UnitOfWork(pool, epochs, CODEC) as uow:
            changes = (ItemChange(TENANT, CATALOG, i, "lamp", i) for i in ITEMS)
            accept(uow, TENANT, CATALOG, *changes)
    finally:
        pool.close()
        epochs.close()

    processes = _processes(env, tmp_path)
    reviewers = Reviewers(
        processes[0].env["GAPLESS_RESOLVER_URL"],
        os.environ["GAPLESS_RESOLVER_TOKEN"],
        dsns["GAPLESS_RESOLVER_DSN"],
        dsns["GAPLESS_CONTROL_DSN"],
    )
    thread = threading.Thread(target=reviewers.run, daemon=True)
    try:
        for p in processes:
            p.start()
        wait_for(lambda: all(p.health() == 200 for p in processes), "every process ready", 120)
        thread.start()
        wait_for(lambda: len(reviewers.acknowledged) >= 20, "decisions before the kill", 60)

        old = postgres_ha.primary(formation)
        assert old is not None
        before = len(reviewers.acknowledged)
        killed_at = time.monotonic()
        postgres_ha.kill_node(formation, old, print)
        wait_for(lambda: reviewers.refused["UNAVAILABLE"] > 0, "writes refused", 60)
        wait_for(lambda: len(reviewers.acknowledged) >= before + 20, "writes accepted again", 120)
        failover_s = min(t for t in reviewers.accepted_at if t > killed_at) - killed_at
        print(f"failover_s {failover_s:.1f}, refused meanwhile {dict(reviewers.refused)}")
        assert all(p.alive() for p in processes), "\n".join(p.tail() for p in processes)

        postgres_ha.restart_node(formation, old, print)
        wait_for(
            lambda: postgres_ha.states(formation).get(old.name) == "secondary",
            "the old primary back as a standby",
            120,
        )
        reviewers.stop.set()
        thread.join(60)
        resolver, product = dsns["GAPLESS_RESOLVER_MIGRATION_DSN"], dsns["GAPLESS_PRODUCT_DSN"]
        cursor = _rows(resolver, "SELECT position FROM stream_cursor WHERE tenant_id = %s")
        assert len(cursor) == 1
        last = int(str(cursor[0][0]))
        wait_for(
            lambda: (
                _rows(product, "SELECT position FROM stream_progress WHERE tenant_id = %s")
                == [(last,)]
            ),
            "the agents at the cursor",
            180,
        )
        assert all(p.health() == 200 for p in processes)
    finally:
        reviewers.stop.set()
        for p in reversed(processes):
            p.stop()
    logs = "\n".join(p.tail() for p in processes)
    for p in processes:
        assert p.popen is not None and p.popen.returncode in (0, -signal.SIGTERM), logs
    assert reviewers.unexpected == [], reviewers.unexpected
    assert failover_s < 60

    # Every acknowledged decision survived the failover (synchronous replication).
    cases = "SELECT case_id FROM decision WHERE tenant_id = %s AND case_id IS NOT NULL"
    decided = {str(c) for (c,) in _rows(resolver, cases)}
    assert set(reviewers.acknowledged) <= decided
    # Contiguous positions, each applied or ignored once.
    outbox = _rows(
        resolver, "SELECT count(*), min(position), max(position) FROM outbox WHERE tenant_id = %s"
    )
    assert outbox == [(last, 1, last)]
    counted = _rows(
        product,
        "SELECT applied_count + ignored_count FROM stream_progress WHERE tenant_id = %s",
    )
    assert counted == [(last,)], logs
    mapping = (
        "SELECT listing_id, item_id, revision, decision_id FROM {} WHERE tenant_id = %s ORDER BY 1"
    )
    assert _rows(product, mapping.format("product_listing_mapping")) == _rows(
        resolver, mapping.format("listing_mapping")
    )
    items = "SELECT item_id, revision FROM {} WHERE tenant_id = %s ORDER BY 1"
    assert _rows(product, items.format("product_item")) == _rows(
        resolver, items.format("catalog_item")
    )
