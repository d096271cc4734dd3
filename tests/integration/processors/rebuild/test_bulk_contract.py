"""The bulk path equals the live path, against real PostgreSQL, the S3 server and the
resolver's own export.

A random workload writes a catalog; while more writers keep committing, the resolver
exports its state at W. The export is loaded through the bulk path
(``processors.rebuild.load``: each chunk copied straight into its kind's table, the
derived search documents built set-based at the end) into one generation,
and a replay of events 1..W goes through the live ``Applier`` into another. Every
column of every projection table, derived ones included, must be equal row by row
(but ``position`` and ``updated_at``: a loaded row stores W, a live one its event's
position). So the export is the state at W exactly (every aggregate at its revision
at W: what the replay of 1..W leaves), and the load writes what the live path
would.
"""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.product import rebuilds as sql
from db.settings import DatabaseSettings
from infra.demo.workload import run_workload
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from processors.projections import registry
from processors.rebuild.load import load, read_manifest
from producers.exports.export import begin, write
from producers.exports.settings import ExportSettings
from producers.exports.store import ExportStore
from producers.retention import leases
from schemas.codec import CODEC
from schemas.exports import Manifest
from schemas.ids import StreamId

TENANT, CATALOG = "x", "catalog1"
STREAM = StreamId(TENANT, CATALOG, 1)
TABLES = registry.TABLES
LEFT_OUT = {"generation", "position", "updated_at"}


@pytest.fixture()
def store(services: dict[str, str]) -> ExportStore:
    return ExportStore.from_settings(ExportSettings())


def _epoch_after_more_commits(settings: DatabaseSettings, epochs: EpochSource):  # type: ignore[no-untyped-def]
    """The export's epoch check (its step 4, after the snapshot closed) waits until the
    writers have committed past W, so the export provably ignored what they wrote
    after its snapshot began."""
    pair = (TENANT, CATALOG)

    def check(_stream: StreamId) -> int | None:
        with psycopg.connect(settings.resolver_dsn) as conn:
            pinned = conn.execute("SELECT max(pinned_position) FROM rebuild_lease").fetchone()
            deadline = time.monotonic() + 30
            while conn.execute("SELECT position FROM stream_cursor").fetchone() <= pinned:  # type: ignore[operator]
                assert time.monotonic() < deadline, "the writers did not commit"
        return epochs.epochs([pair], refresh=True).get(pair)

    return check


def _export_while_writing(settings: DatabaseSettings, store: ExportStore) -> Manifest:
    pool = ConnectionPool(settings.resolver_dsn, min_size=1, max_size=3, open=True)
    epochs = EpochSource(settings.control_dsn, ttl_seconds=0)
    stop = threading.Event()
    try:
        run_workload(pool, epochs, [(TENANT, CATALOG)], events=400, writers=2)
        more = threading.Thread(
            target=run_workload,
            args=(pool, epochs, [(TENANT, CATALOG)]),
            kwargs={"events": 100_000, "writers": 1, "stop": stop, "id_tag": "during"},
        )
        more.start()
        try:
            with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
                lease = leases.create(conn, STREAM, "test", 600)
                export = begin(conn, lease.lease_id, "test", 1)
            done = write(
                settings.resolver_dsn,
                store,
                _epoch_after_more_commits(settings, epochs),
                export.export_id,
                60,
            )
        finally:
            stop.set()
            more.join()
    finally:
        pool.close()
        epochs.close()
    assert done.status == "ready", (done.error_code, done.error_message)
    assert done.manifest_key and done.manifest_sha256
    return read_manifest(store.get, done.manifest_key, done.manifest_sha256)


def _replay_live(settings: DatabaseSettings, through: int) -> None:
    """Events 1..through, in position order, through the live applier (generation 1)."""
    with psycopg.connect(settings.resolver_dsn) as conn:
        rows = conn.execute(
            "SELECT position, key, value FROM outbox WHERE position <= %s ORDER BY position",
            (through,),
        ).fetchall()
    assert [r[0] for r in rows] == list(range(1, through + 1))
    applier = Applier(settings.product_dsn, EpochSource(settings.control_dsn), CODEC)
    applier.apply([RawMessage("events", 0, p, bytes(k), bytes(v)) for p, k, v in rows])
    applier.close()


def _load_bulk(settings: DatabaseSettings, store: ExportStore, manifest: Manifest) -> int:
    rebuild_id = uuid.uuid4()
    with psycopg.connect(settings.product_dsn) as conn:
        sql.insert(conn, rebuild_id, "product-applier", STREAM, "shadow", "test", "")
        generation = sql.next_generation(conn, TENANT, CATALOG)
        sql.update(
            conn,
            rebuild_id,
            "loading",
            generation=generation,
            export_position=manifest.position,
            chunks_total=len(manifest.chunks),
        )
    loaded = load(settings.product_dsn, rebuild_id, manifest, store.get)
    assert (loaded.chunks, loaded.rows) == (len(manifest.chunks), manifest.records)
    return generation


def _columns(conn: psycopg.Connection, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = %s"
        " ORDER BY ordinal_position",
        (table,),
    ).fetchall()
    return [r[0] for r in rows if r[0] not in LEFT_OUT]


def _rows(conn: psycopg.Connection, table: str, generation: int) -> list[tuple[object, ...]]:
    columns = _columns(conn, table)
    rows = conn.execute(
        f"SELECT {', '.join(f'{c}::text' for c in columns)} FROM {table}"
        " WHERE generation = %s ORDER BY 1, 2, 3, 4",
        (generation,),
    ).fetchall()
    return sorted(rows, key=repr)


def test_the_bulk_load_of_an_export_at_w_equals_the_live_replay_of_events_1_to_w(
    clean_db: DatabaseSettings, store: ExportStore
) -> None:
    manifest = _export_while_writing(clean_db, store)
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        committed = conn.execute("SELECT position FROM stream_cursor").fetchone()[0]  # type: ignore[index]
    assert committed > manifest.position, "the writers committed during the export"
    assert len(manifest.chunks) > 1
    _replay_live(clean_db, manifest.position)
    generation = _load_bulk(clean_db, store, manifest)
    assert generation == 2
    with psycopg.connect(clean_db.product_dsn) as conn:
        for table in TABLES:
            live, bulk = _rows(conn, table, 1), _rows(conn, table, generation)
            assert live, f"the workload wrote no {table}"
            assert bulk == live, table
            positions = conn.execute(
                f"SELECT DISTINCT position FROM {table} WHERE generation = %s", (generation,)
            ).fetchall()
            assert positions == [(manifest.position,)], f"{table}: a loaded row stores W"
