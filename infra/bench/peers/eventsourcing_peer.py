"""pyeventsourcing 9.5.6's ProjectionRunner following equivalent events into a
projection of the same shape as ours.

Equivalent events: one new ``CatalogItem`` aggregate per event (its creation event,
``Upserted``, carrying the item's class, status, title and attributes, as our
``CatalogItemUpserted``), saved by an ``Application`` on PostgreSQL (the sandbox's
product database) 100 aggregates per ``save``, before the clock. The projection
writes each event as one row of a ``LIKE product_item`` copy with the same columns
and ``ON CONFLICT … WHERE revision <`` guard as ours, and its tracking row in the
same transaction: the runner's documented way (one transaction per event). The
clock runs from constructing the runner to the tracking row reaching the last
notification id.
"""

from __future__ import annotations

import json
import time
import uuid
from functools import singledispatchmethod
from typing import Any

import psycopg
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import Tracking
from eventsourcing.postgres import PostgresDatastore, PostgresTrackingRecorder
from eventsourcing.projection import Projection, ProjectionRunner
from psycopg.conninfo import conninfo_to_dict
from psycopg.sql import SQL

from infra.bench.sandbox import Echo, Sandbox
from infra.bench.timing import Rate

SAVE_BATCH = 100
POLL_S = 0.02
VIEW_TABLE = "es_product_item"


class CatalogItem(Aggregate):
    """A catalog item, created by the event that upserts it."""

    class Upserted(Aggregate.Created):
        tenant_id: str
        catalog_id: str
        item_id: str
        class_id: str
        status: str
        title: str
        attributes: dict[str, str]

    @event(Upserted)
    def __init__(
        self,
        tenant_id: str,
        catalog_id: str,
        item_id: str,
        class_id: str,
        status: str,
        title: str,
        attributes: dict[str, str],
    ) -> None:
        self.tenant_id = tenant_id
        self.catalog_id = catalog_id
        self.item_id = item_id
        self.class_id = class_id
        self.status = status
        self.title = title
        self.attributes = attributes


class Catalog(Application[uuid.UUID]):
    """The event-sourced application whose notification log the runner follows."""

    name = "BenchCatalog"


UPSERT = SQL(
    f"INSERT INTO {VIEW_TABLE} (generation, tenant_id, catalog_id, item_id, class_id,"
    " status, title, parent_item_id, attributes, revision, position)"
    " VALUES (1, %(tenant_id)s, %(catalog_id)s, %(item_id)s, %(class_id)s, %(status)s,"
    " %(title)s, NULL, %(attributes)s::jsonb, %(revision)s, %(position)s)"
    " ON CONFLICT (generation, tenant_id, catalog_id, item_id) DO UPDATE SET"
    " class_id = excluded.class_id, status = excluded.status, title = excluded.title,"
    " attributes = excluded.attributes, revision = excluded.revision,"
    f" position = excluded.position, updated_at = now() WHERE {VIEW_TABLE}.revision"
    " < excluded.revision"
)


class ItemView(PostgresTrackingRecorder):
    """The materialised view: our projection's table shape, plus the tracking table."""

    def __init__(self, datastore: PostgresDatastore, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        self.sql_create_statements.append(
            SQL(
                f"CREATE TABLE IF NOT EXISTS {VIEW_TABLE} (LIKE product_item INCLUDING ALL)"
            ).format()
        )

    def upsert(self, item: CatalogItem.Upserted, tracking: Tracking) -> None:
        """One transaction: the item's row and the tracking row (the runner resumes
        after the last tracked notification, so a crash between events loses none)."""
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(
                UPSERT,
                {
                    "tenant_id": item.tenant_id,
                    "catalog_id": item.catalog_id,
                    "item_id": item.item_id,
                    "class_id": item.class_id,
                    "status": item.status,
                    "title": item.title,
                    "attributes": json.dumps(item.attributes),
                    "revision": item.originator_version,
                    "position": tracking.notification_id,
                },
                prepare=True,
            )
            self._insert_tracking(curs, tracking)


class ItemProjection(Projection[ItemView]):
    name = "bench_items"

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.insert_tracking(tracking)

    @process_event.register
    def _(self, domain_event: CatalogItem.Upserted, tracking: Tracking) -> None:
        self.view.upsert(domain_event, tracking)


def environment(box: Sandbox) -> dict[str, str]:
    """pyeventsourcing's configuration: PostgreSQL, the sandbox's product database."""
    params = conninfo_to_dict(box.databases.product_dsn)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": str(params["dbname"]),
        "POSTGRES_HOST": str(params.get("host") or "127.0.0.1"),
        "POSTGRES_PORT": str(params.get("port") or 5432),
        "POSTGRES_USER": str(params.get("user") or "postgres"),
        "POSTGRES_PASSWORD": str(params.get("password") or "unused"),
    }


def measure_eventsourcing(box: Sandbox, events: int, echo: Echo) -> Rate:
    """Events/s of the ProjectionRunner catching up ``events`` saved events."""
    env = environment(box)
    app = Catalog(env=env)
    try:
        echo(f"peers: saving {events} pyeventsourcing events, {SAVE_BATCH} per save")
        tenant = box.tenant("es")
        for first in range(0, events, SAVE_BATCH):
            items = [
                CatalogItem(
                    tenant,
                    "catalog1",
                    f"item-{n}",
                    "shoe",
                    "active",
                    f"Trail shoe item-{n}",
                    {"colour": "blue", "size": "42"},
                )
                for n in range(first, min(first + SAVE_BATCH, events))
            ]
            app.save(*items)
        last = app.recorder.max_notification_id()
    finally:
        app.close()
    if last is None:
        raise RuntimeError("pyeventsourcing recorded no events")
    echo(f"peers: pyeventsourcing's ProjectionRunner following {events} events")
    deadline = time.monotonic() + 60 + events / 100
    start = time.perf_counter()
    with ProjectionRunner(
        application_class=Catalog,
        projection_class=ItemProjection,
        view_class=ItemView,
        env=env,
    ) as runner:
        while (runner.view.max_tracking_id(Catalog.name) or 0) < last:
            runner.run_forever(timeout=POLL_S)  # re-raises the runner's error
            if time.monotonic() > deadline:
                raise RuntimeError(f"pyeventsourcing's runner did not reach {last}")
        elapsed = time.perf_counter() - start
    with psycopg.connect(box.databases.product_dsn, autocommit=True) as conn:
        row = conn.execute(f"SELECT count(*) FROM {VIEW_TABLE}").fetchone()
    if row is None or row[0] != events:
        raise RuntimeError(f"pyeventsourcing's projection has {row} rows, not {events}")
    return Rate(events, elapsed)
