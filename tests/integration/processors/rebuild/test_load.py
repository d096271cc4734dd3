"""The load phase against real PostgreSQL and the S3 server: an export loads into its
own generation, equal to what the live path built from the same events, resumes
after a crash at the next chunk, and a corrupted chunk writes nothing."""

from __future__ import annotations

import dataclasses
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
from processors.rebuild.exceptions import ExportMismatch
from processors.rebuild.load import load, read_manifest
from producers.exports.export import begin, write
from producers.exports.settings import ExportSettings
from producers.exports.store import ExportStore
from producers.retention import leases
from schemas.codec import CODEC
from schemas.exports import KINDS, ExportCorrupt, Manifest, sha256
from schemas.ids import StreamId

TENANT, CATALOG = "x", "catalog1"
STREAM = StreamId(TENANT, CATALOG, 1)
PROJECTED = {
    "product_item": "item_id, class_id, status, title, parent_item_id, attributes, revision",
    "product_listing_mapping": "listing_id, item_id, item_revision, revision",
    "product_shipping_policy_version": "policy_id, version, scope, effective_from, terms",
    "product_attribute_definition": "attribute_key, version, status, revision",
    "product_attribute_value": "item_id, attribute_key, value, revision",
    "product_item_split": "split_id, source_item_id, remaps",
}


@pytest.fixture()
def store(services: dict[str, str]) -> ExportStore:
    return ExportStore.from_settings(ExportSettings())


def _history_and_export(settings: DatabaseSettings, store: ExportStore) -> Manifest:
    pool = ConnectionPool(settings.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(settings.control_dsn, ttl_seconds=0)
    run_workload(pool, epochs, [(TENANT, CATALOG)], events=300, writers=2)
    pool.close()
    with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
        lease = leases.create(conn, STREAM, "test", 600)
        export = begin(conn, lease.lease_id, "test", 1)
    pair = (TENANT, CATALOG)
    done = write(
        settings.resolver_dsn,
        store,
        lambda _s: epochs.epochs([pair], refresh=True).get(pair),
        export.export_id,
        40,
    )
    epochs.close()
    assert done.status == "ready" and done.manifest_key and done.manifest_sha256
    return read_manifest(store.get, done.manifest_key, done.manifest_sha256)


def _live_apply(settings: DatabaseSettings) -> None:
    """The live path's generation 1, from every event in the outbox."""
    with psycopg.connect(settings.resolver_dsn) as conn:
        rows = conn.execute("SELECT position, key, value FROM outbox ORDER BY position").fetchall()
    applier = Applier(settings.product_dsn, EpochSource(settings.control_dsn), CODEC)
    applier.apply([RawMessage("events", 0, p, bytes(k), bytes(v)) for p, k, v in rows])
    applier.close()


def _rows(settings: DatabaseSettings, generation: int) -> dict[str, list[tuple[object, ...]]]:
    with psycopg.connect(settings.product_dsn) as conn:
        return {
            table: conn.execute(
                f"SELECT {columns} FROM {table} WHERE generation = %s ORDER BY 1, 2",
                (generation,),
            ).fetchall()
            for table, columns in PROJECTED.items()
        }


def _rebuild(settings: DatabaseSettings, manifest: Manifest) -> uuid.UUID:
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
    return rebuild_id


@pytest.mark.parametrize("connections", [1, 3])
def test_an_export_loads_into_its_own_generation_equal_to_the_live_one(
    clean_db: DatabaseSettings, store: ExportStore, connections: int
) -> None:
    manifest = _history_and_export(clean_db, store)
    _live_apply(clean_db)
    rebuild_id = _rebuild(clean_db, manifest)
    seen: list[int] = []
    loaded = load(
        clean_db.product_dsn,
        rebuild_id,
        manifest,
        store.get,
        lambda n, _r: seen.append(n),
        connections=connections,
    )
    assert (loaded.chunks, loaded.rows) == (len(manifest.chunks), manifest.records)
    assert len(manifest.chunks) > 2 * connections  # so the copies overlap
    assert sorted(seen) == list(range(1, len(manifest.chunks) + 1))
    with psycopg.connect(clean_db.product_dsn) as conn:
        row = sql.get(conn, rebuild_id)
        shadow = conn.execute(
            "SELECT position, generation FROM stream_progress WHERE consumer = 'shadow'"
        ).fetchone()
    assert row is not None and row.phase == "catching_up" and row.generation == 2
    assert shadow == (manifest.position, 2)
    # what the export holds, and what each kind cost to load (the rebuild's progress)
    assert (row.rows_total, row.rows_by_kind) == (manifest.records, manifest.by_aggregate)
    assert {k: c["rows"] for k, c in row.load_cost.items()} == manifest.by_aggregate
    assert all(c["seconds"] > 0 for c in row.load_cost.values())
    assert sorted(row.loaded_chunks) == list(range(1, len(manifest.chunks) + 1))
    live, rebuilt = _rows(clean_db, 1), _rows(clean_db, 2)
    assert all(live.values())
    assert rebuilt == live


def test_a_load_resumes_at_the_next_chunk_and_a_corrupt_chunk_writes_nothing(
    clean_db: DatabaseSettings, store: ExportStore
) -> None:
    manifest = _history_and_export(clean_db, store)
    rebuild_id = _rebuild(clean_db, manifest)
    broken = manifest.chunks[2].key
    real = store.get

    def fetch(key: str) -> bytes:
        data = real(key)
        return data[:-1] + bytes([data[-1] ^ 1]) if key == broken else data

    with pytest.raises(ExportCorrupt, match="checksum"):
        load(clean_db.product_dsn, rebuild_id, manifest, fetch)
    with psycopg.connect(clean_db.product_dsn) as conn:
        row = sql.get(conn, rebuild_id)
    assert row is not None and (row.phase, row.chunks_loaded) == ("loading", 2)
    assert row.rows_total == manifest.records
    two = manifest.chunks[0].records + manifest.chunks[1].records
    assert sum(c["rows"] for c in row.load_cost.values()) == two == row.rows_loaded
    before = _rows(clean_db, 2)

    fetched: list[str] = []

    def counting(key: str) -> bytes:
        fetched.append(key)
        return real(key)

    loaded = load(clean_db.product_dsn, rebuild_id, manifest, counting)
    assert fetched == [c.key for c in manifest.chunks[2:]]  # the first two are not read again
    assert loaded.rows == manifest.records
    with psycopg.connect(clean_db.product_dsn) as conn:
        row = sql.get(conn, rebuild_id)
    assert row is not None  # the resumed load kept the first two chunks' costs
    assert {k: c["rows"] for k, c in row.load_cost.items()} == manifest.by_aggregate
    assert sum(map(len, _rows(clean_db, 2).values())) >= sum(map(len, before.values()))
    assert _rows(clean_db, 1) == {t: [] for t in PROJECTED}  # serving untouched


def test_a_load_on_several_connections_stops_at_a_failure_and_resumes_with_what_is_missing(
    clean_db: DatabaseSettings, store: ExportStore
) -> None:
    """Three chunks at once, and the fetch of the fifth fails: the copies under way
    end (each commits or rolls back whole), none starts after, and the next load
    reads exactly the chunks not recorded, whatever order they committed in."""
    manifest = _history_and_export(clean_db, store)
    _live_apply(clean_db)
    rebuild_id = _rebuild(clean_db, manifest)
    failing = manifest.chunks[4].key
    real = store.get
    started: list[str] = []

    def fetch(key: str) -> bytes:
        started.append(key)
        if key == failing:
            raise OSError("the bucket went away")
        return real(key)

    with pytest.raises(OSError, match="went away"):
        load(clean_db.product_dsn, rebuild_id, manifest, fetch, connections=3)
    with psycopg.connect(clean_db.product_dsn) as conn:
        row = sql.get(conn, rebuild_id)
    assert row is not None and row.phase == "loading"
    numbers = {c.key: n for n, c in enumerate(manifest.chunks, start=1)}
    recorded = set(row.loaded_chunks)
    assert recorded == {numbers[k] for k in started} - {5}  # each one begun ended whole
    assert len(started) < len(manifest.chunks)  # none started after the failure
    assert row.rows_loaded == sum(manifest.chunks[n - 1].records for n in recorded)
    assert sum(map(len, _rows(clean_db, 2).values())) == row.rows_loaded

    fetched: list[str] = []

    def counting(key: str) -> bytes:
        fetched.append(key)
        return real(key)

    load(clean_db.product_dsn, rebuild_id, manifest, counting, connections=3)
    assert sorted(numbers[k] for k in fetched) == sorted(
        set(range(1, len(manifest.chunks) + 1)) - recorded
    )
    with psycopg.connect(clean_db.product_dsn) as conn:
        row = sql.get(conn, rebuild_id)
    assert row is not None and row.phase == "catching_up"
    assert {k: c["rows"] for k, c in row.load_cost.items()} == manifest.by_aggregate
    assert _rows(clean_db, 2) == _rows(clean_db, 1)


def test_a_foreign_manifest_or_a_chunk_it_does_not_describe_writes_nothing(
    clean_db: DatabaseSettings, store: ExportStore
) -> None:
    manifest = _history_and_export(clean_db, store)
    rebuild_id = _rebuild(clean_db, manifest)
    elsewhere = dataclasses.replace(manifest, position=manifest.position + 1)
    with pytest.raises(ExportMismatch, match="not of"):
        load(clean_db.product_dsn, rebuild_id, elsewhere, store.get)
    first = manifest.chunks[0]
    unknown = dataclasses.replace(first, kinds={**first.kinds, "catalog_class": 0})
    with pytest.raises(ExportMismatch, match="no projection loads"):
        load(
            clean_db.product_dsn,
            rebuild_id,
            dataclasses.replace(manifest, chunks=(unknown,)),
            store.get,
        )
    # a chunk of two kinds, and a chunk labelled as another kind than its records
    some = next(iter(first.kinds))
    other = next(k for k in ("listing_mapping", "catalog_item") if k != some)
    two_kinds = {some: first.records - 1, other: 1}
    mixed = dataclasses.replace(manifest, chunks=(dataclasses.replace(first, kinds=two_kinds),))
    with pytest.raises(ExportCorrupt, match="not one kind"):
        load(clean_db.product_dsn, rebuild_id, mixed, store.get)
    relabelled = dataclasses.replace(first, kinds={other: first.records})
    with pytest.raises(ExportCorrupt, match=f"a {other} record PostgreSQL cannot read"):
        load(
            clean_db.product_dsn,
            rebuild_id,
            dataclasses.replace(manifest, chunks=(relabelled,)),
            store.get,
        )
    # a record whose checksum matches but whose revision is no number: rolled back
    data = store.get(first.key)
    line = data.split(b"\n")[0].split(b"\t")
    line[[f.name for f in KINDS[first.kind]].index("revision")] = b"x"
    bad = b"\t".join(line) + data[data.index(b"\n") :]
    bad_key = first.key + ".bad"
    store.put(bad_key, bad)
    unreadable = dataclasses.replace(first, key=bad_key, sha256=sha256(bad))
    with pytest.raises(ExportCorrupt, match="PostgreSQL cannot read"):
        load(
            clean_db.product_dsn,
            rebuild_id,
            dataclasses.replace(manifest, chunks=(unreadable,)),
            store.get,
        )
    twice = dataclasses.replace(manifest, chunks=(first, first))
    with pytest.raises(ExportMismatch, match="twice"):
        load(clean_db.product_dsn, rebuild_id, twice, store.get)
    with psycopg.connect(clean_db.product_dsn) as conn:
        row = sql.get(conn, rebuild_id)
    assert row is not None and (row.phase, row.chunks_loaded) == ("loading", 1)
    assert sum(map(len, _rows(clean_db, 2).values())) == first.records  # the first chunk only
    assert _rows(clean_db, 1) == {t: [] for t in PROJECTED}  # serving untouched
