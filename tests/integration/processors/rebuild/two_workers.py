"""A rebuild rig with two agents workers: the live applier, the resolver API, and two
orchestrators (``a``, ``b``) on the same product database, as two agents processes
run them. Worker ``a``'s resolver client can be told to run something in the middle
of its next catch-up page: after the page is fetched, before it is applied (another
worker's step, an operator's command, the cleanup)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.product import rebuilds as sql
from db.settings import DatabaseSettings
from infra.demo.projection_check import compare
from infra.demo.workload import run_workload
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from processors.gaps import retained_topic
from processors.rebuild.orchestrator import Orchestrator
from processors.resolver_client import ResolverClient, RetainedPage
from producers.exports.settings import ExportSettings
from producers.exports.store import ExportStore
from schemas.codec import CODEC
from schemas.ids import StreamId
from tests.fixtures.resolver_api import RunningApi

TENANT, CATALOG = "x", "catalog1"
STREAM = StreamId(TENANT, CATALOG, 1)
LIVE = "product-applier"


class Interrupting(ResolverClient):
    """A real client that runs ``meanwhile`` once, after fetching its next catch-up
    page and before handing it back (as a worker stalled at that point would)."""

    meanwhile: Callable[[], None] | None = None

    def export_events(
        self, lease_id: str, history_epoch: int, after: int, limit: int = 500
    ) -> RetainedPage:
        page = super().export_events(lease_id, history_epoch, after, limit)
        run, self.meanwhile = self.meanwhile, None
        if run is not None:
            run()
        return page


@dataclass
class TwoWorkers:
    settings: DatabaseSettings
    api: RunningApi
    pool: ConnectionPool
    epochs: EpochSource
    client: ResolverClient
    a_client: Interrupting
    live: Applier
    a: Orchestrator
    b: Orchestrator
    writes: int = 0
    others: list[Orchestrator] = field(default_factory=list)

    def worker(self, name: str, client: ResolverClient | None = None) -> Orchestrator:
        """One more worker (closed with the rig)."""
        made = Orchestrator(
            self.settings.product_dsn,
            client or self.client,
            ExportStore.from_settings(ExportSettings()).get,
            name,
            epochs=EpochSource(self.settings.control_dsn),
            page_size=100,
        )
        self.others.append(made)
        return made

    def write(self, events: int) -> None:
        self.writes += 1
        run_workload(
            self.pool,
            self.epochs,
            [(TENANT, CATALOG)],
            events=events,
            writers=2,
            id_tag=f"w{self.writes}-",
        )

    def feed_live(self) -> int:
        """Apply every retained copy after its progress to the live consumer."""
        progress = self.progress(LIVE) or 0
        while True:
            page = self.client.retained_events(STREAM, progress, 500)
            if not page.events:
                return progress
            result = self.live.apply(
                [
                    RawMessage(
                        retained_topic(STREAM), -1, e.position, e.key, e.value, STREAM, e.position
                    )
                    for e in page.events
                ]
            )
            progress = result.progress[STREAM]

    def progress(self, consumer: str) -> int | None:
        with psycopg.connect(self.settings.product_dsn) as conn:
            row = conn.execute(
                "SELECT position FROM stream_progress WHERE consumer = %s AND tenant_id = %s"
                " AND catalog_id = %s AND history_epoch = %s",
                (consumer, *STREAM),
            ).fetchone()
        return None if row is None else int(row[0])

    def committed(self) -> int:
        with psycopg.connect(self.settings.resolver_dsn) as conn:
            row = conn.execute(
                "SELECT position FROM stream_cursor WHERE tenant_id = %s AND catalog_id = %s"
                " AND history_epoch = %s",
                tuple(STREAM),
            ).fetchone()
        assert row is not None
        return int(row[0])

    def live_generation(self) -> int:
        with psycopg.connect(self.settings.product_dsn) as conn:
            row = conn.execute(
                "SELECT generation FROM stream_progress WHERE consumer = %s"
                " AND tenant_id = %s AND catalog_id = %s AND history_epoch = %s",
                (LIVE, *STREAM),
            ).fetchone()
        assert row is not None
        return int(row[0])

    def request(self) -> uuid.UUID:
        rebuild_id = uuid.uuid4()
        with psycopg.connect(self.settings.product_dsn) as conn:
            assert sql.insert(
                conn, rebuild_id, LIVE, STREAM, f"shadow-{rebuild_id.hex[:6]}", "op", "t"
            )
        return rebuild_id

    def row(self, rebuild_id: uuid.UUID) -> sql.RebuildRow:
        with psycopg.connect(self.settings.product_dsn) as conn:
            row = sql.get(conn, rebuild_id)
        assert row is not None
        return row

    def until(self, worker: Orchestrator, rebuild_id: uuid.UUID, phase: str) -> sql.RebuildRow:
        """Steps of ``worker`` until the rebuild is in ``phase`` (or finished)."""
        deadline = time.monotonic() + 90
        while True:
            row = worker.advance(rebuild_id)
            assert row is not None, f"{worker.worker} does not hold {rebuild_id}"
            if row.phase in (phase, "failed", "done", "cancelled"):
                return row
            assert time.monotonic() < deadline, row

    def expire_claim(self, rebuild_id: uuid.UUID) -> None:
        """The claim's time ran out (its worker stalled longer than the claim lasts)."""
        with psycopg.connect(self.settings.product_dsn) as conn:
            conn.execute(
                "UPDATE rebuild SET claim_expires_at = clock_timestamp() - interval '1 second'"
                " WHERE rebuild_id = %s",
                (rebuild_id,),
            )

    def shadow_rows(self, shadow: str) -> tuple[int, int]:
        """The shadow consumer's (progress rows, inbox rows)."""
        with psycopg.connect(self.settings.product_dsn) as conn:
            row = conn.execute(
                "SELECT (SELECT count(*) FROM stream_progress WHERE consumer = %s),"
                " (SELECT count(*) FROM inbox WHERE consumer = %s)",
                (shadow, shadow),
            ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def accepted_equals(self, generation: int) -> None:
        comparison = compare(
            self.settings.resolver_dsn, self.settings.product_dsn, TENANT, generation
        )
        assert comparison.differences == [], comparison.differences[:5]
        assert sum(comparison.rows.values()) > 0


@pytest.fixture()
def two(
    clean_db: DatabaseSettings, resolver_api: RunningApi, services: dict[str, str]
) -> Iterator[TwoWorkers]:
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    client = ResolverClient(resolver_api.url, resolver_api.token)
    a_client = Interrupting(resolver_api.url, resolver_api.token)
    live = Applier(clean_db.product_dsn, EpochSource(clean_db.control_dsn), CODEC, LIVE)
    store = ExportStore.from_settings(ExportSettings())

    def worker(name: str, worker_client: ResolverClient) -> Orchestrator:
        return Orchestrator(
            clean_db.product_dsn,
            worker_client,
            store.get,
            name,
            epochs=EpochSource(clean_db.control_dsn),
            page_size=100,
        )

    rig = TwoWorkers(
        clean_db,
        resolver_api,
        pool,
        epochs,
        client,
        a_client,
        live,
        worker("worker-a", a_client),
        worker("worker-b", client),
    )
    rig.write(300)
    yield rig
    for orchestrator in (rig.a, rig.b, *rig.others):
        orchestrator.close()
    live.close()
    a_client.close()
    client.close()
    pool.close()
    epochs.close()
