"""Snapshot exports against real PostgreSQL and the S3 server: the exported state is
exactly the resolver's state at W, also while writers keep committing; only a live
lease's export becomes ready; every chunk is checked by its SHA-256."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg_pool import ConnectionPool
from pydantic import SecretStr

from db.control.epochs import EpochSource
from db.resolver import exports as sql
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from infra.demo.workload import run_workload
from producers.api import create_app
from producers.exports.export import begin, write
from producers.exports.retention import sweep_exports
from producers.exports.settings import ExportSettings
from producers.exports.store import ExportStore
from producers.resolver.catalog_items import ItemChange
from producers.resolver.exceptions import DomainError
from producers.retention import leases
from producers.settings import ApiSettings
from schemas.codec import CODEC
from schemas.events import (
    AttributeDefined,
    AttributeValueSet,
    CatalogItemRetired,
    CatalogItemSplit,
    CatalogItemUpserted,
    Envelope,
    ListingMapped,
    ShippingPolicyVersioned,
)
from schemas.exports import KINDS, ExportCorrupt, Manifest, check_chunk, prefix, read_record
from schemas.http.auth import token_hash
from schemas.ids import StreamId, definition_id, value_id
from tests.fixtures.decisions import accept

TENANT, CATALOG = "x", "catalog1"
Key = tuple[str, ...]


@pytest.fixture()
def store(services: dict[str, str]) -> ExportStore:
    return ExportStore.from_settings(ExportSettings())


def _current(settings: DatabaseSettings) -> EpochSource:
    return EpochSource(settings.control_dsn, ttl_seconds=0)


def _epoch_of(epochs: EpochSource):  # type: ignore[no-untyped-def]
    def current(stream: StreamId) -> int | None:
        pair = (stream.tenant_id, stream.catalog_id)
        return epochs.epochs([pair], refresh=True).get(pair)

    return current


def _workload(settings: DatabaseSettings, events: int, seed_writers: int = 2) -> None:
    pool = ConnectionPool(settings.resolver_dsn, min_size=1, max_size=seed_writers, open=True)
    epochs = EpochSource(settings.control_dsn)
    try:
        run_workload(pool, epochs, [(TENANT, CATALOG)], events=events, writers=seed_writers)
    finally:
        pool.close()
        epochs.close()


def _keep_writing(settings: DatabaseSettings, stop: threading.Event) -> None:
    """New revisions of active items, and new items, until ``stop``."""
    pool = ConnectionPool(settings.resolver_dsn, min_size=1, max_size=1, open=True)
    epochs = EpochSource(settings.control_dsn)
    with psycopg.connect(settings.resolver_dsn) as conn:
        active = [
            (r[0], r[1])
            for r in conn.execute(
                "SELECT item_id, class_id FROM catalog_item WHERE status = 'active'"
                " AND parent_item_id IS NULL ORDER BY item_id"
            )
        ]
    n = 0
    try:
        while not stop.is_set():
            item_id, class_id = active[n % len(active)] if n % 2 else (f"new-{n}", "lamp")
            change = ItemChange(TENANT, CATALOG, item_id, class_id, f"title {n}")
            try:
                with UnitOfWork(pool, epochs, CODEC) as uow:
                    accept(uow, TENANT, CATALOG, change)
            except DomainError:
                pass  # split or retired meanwhile: other writes carry on
            n += 1
    finally:
        pool.close()
        epochs.close()


def _slow(current, settings: DatabaseSettings):  # type: ignore[no-untyped-def]
    """The epoch check (step 4) waits until the writers have committed past W, so the
    test proves the snapshot ignored what they wrote after it began."""

    def check(stream: StreamId) -> int | None:
        with psycopg.connect(settings.resolver_dsn) as conn:
            pinned = conn.execute("SELECT max(pinned_position) FROM rebuild_lease").fetchone()[0]  # type: ignore[index]
            deadline = time.monotonic() + 30
            while conn.execute("SELECT position FROM stream_cursor").fetchone()[0] <= pinned:  # type: ignore[index]
                assert time.monotonic() < deadline, "the writers did not commit"
        return current(stream)

    return check


def _record(event: Envelope) -> tuple[Key, dict[str, object]] | None:
    """The export record the event's aggregate has after it (None: not exported)."""
    a, p = event.aggregate, event.payload
    common: dict[str, object] = {"kind": a.type, "revision": a.revision}
    if isinstance(p, CatalogItemUpserted):
        fields = dict(
            id=a.id, class_id=p.class_id, status=p.status, title=p.title,
            parent_item_id=p.parent_item_id, attributes=dict(p.attributes),
            decision_id=str(p.decision_id),
        )  # fmt: skip
    elif isinstance(p, AttributeDefined):
        fields = dict(
            attribute_key=p.attribute_key, version=p.version, label=p.label,
            value_type=p.value_type, allowed_values=list(p.allowed_values),
            applies_to=sorted(p.applies_to), status=p.status, decision_id=str(p.decision_id),
        )  # fmt: skip
    elif isinstance(p, AttributeValueSet):
        fields = dict(
            item_id=p.item_id, attribute_key=p.attribute_key,
            definition_version=p.definition_version, value_type=p.value_type, value=p.value,
            item_revision=p.item_revision, decision_id=str(p.decision_id),
        )  # fmt: skip
    elif isinstance(p, ListingMapped):
        fields = dict(
            id=a.id, item_id=p.item_id, item_revision=p.item_revision,
            decision_id=str(p.decision_id),
        )  # fmt: skip
    elif isinstance(p, ShippingPolicyVersioned):
        # every version is kept, each its own record; its version is the revision
        record = dict(
            kind=a.type, id=a.id, version=a.revision, scope=p.scope,
            effective_from=p.effective_from, effective_to=p.effective_to,
            terms=dict(p.terms), decision_id=str(p.decision_id),
        )  # fmt: skip
        return (a.type, a.id, str(a.revision)), record
    elif isinstance(p, CatalogItemSplit):
        # the resolver keeps a split's successors as a set; exports list them sorted
        fields = dict(
            id=a.id, source_item_id=p.source_item_id, source_revision=p.source_revision,
            successor_item_ids=sorted(p.successor_item_ids), remaps=dict(p.remaps),
            decision_id=str(p.decision_id),
        )  # fmt: skip
    else:
        return None  # decisions and catalog classes: no product projection keeps them
    return (a.type, a.id), {**common, **fields}


def _replay(settings: DatabaseSettings, stream: StreamId, through: int) -> dict[Key, object]:
    """What events 1..through leave as each aggregate's export record."""
    with psycopg.connect(settings.resolver_dsn) as conn:
        rows = conn.execute(
            "SELECT value FROM outbox WHERE tenant_id = %s AND catalog_id = %s"
            " AND history_epoch = %s AND position <= %s ORDER BY position",
            (*stream, through),
        ).fetchall()
    state: dict[Key, dict[str, object]] = {}
    for (value,) in rows:
        event = CODEC.decode_value(bytes(value))
        if isinstance(event.payload, CatalogItemRetired):
            key = (event.aggregate.type, event.aggregate.id)
            state[key] = {
                **state[key],
                "status": "retired",
                "revision": event.aggregate.revision,
                "decision_id": str(event.payload.decision_id),
            }
            continue
        found = _record(event)
        if found is not None:
            state[found[0]] = found[1]
    return dict(state)


def _parse(kind: str, line: bytes) -> dict[str, object]:
    """One chunk line, decoded as a reader that is not PostgreSQL would."""
    return {"kind": kind, **read_record(kind, line)}


def _key_of(record: dict[str, object]) -> Key:
    kind = str(record["kind"])
    if kind == "attribute_definition":
        return (kind, definition_id(str(record["attribute_key"]), int(str(record["version"]))))
    if kind == "attribute_value":
        return (kind, value_id(str(record["item_id"]), str(record["attribute_key"])))
    if kind == "shipping_policy":
        return (kind, str(record["id"]), str(record["version"]))
    return (kind, str(record["id"]))


def _exported(
    store: ExportStore, manifest_key: str, manifest_sha: str
) -> tuple[Manifest, dict[Key, object]]:
    manifest = Manifest.from_bytes(store.get(manifest_key), manifest_sha)
    state: dict[Key, object] = {}
    kinds_seen: list[str] = []
    for chunk in manifest.chunks:
        data = check_chunk(store.get(chunk.key), chunk.sha256, chunk.records)
        counted: Counter[str] = Counter()
        for line in data.splitlines():
            record = _parse(chunk.kind, line)
            key = _key_of(record)
            assert key not in state, f"{key} exported twice"
            state[key] = record
            counted[str(record["kind"])] += 1
            if not kinds_seen or kinds_seen[-1] != record["kind"]:
                kinds_seen.append(str(record["kind"]))
        assert dict(counted) == chunk.kinds
    assert kinds_seen == [k for k in KINDS if k in kinds_seen], "kinds come in export order"
    return manifest, state


def _lease(settings: DatabaseSettings, stream: StreamId, ttl: int = 600) -> uuid.UUID:
    with psycopg.connect(settings.resolver_dsn, autocommit=True) as conn:
        return leases.create(conn, stream, "test-rebuild", ttl).lease_id


def test_the_export_is_the_state_at_w_while_writers_keep_committing(
    clean_db: DatabaseSettings, store: ExportStore
) -> None:
    _workload(clean_db, 400)
    stream = StreamId(TENANT, CATALOG, 1)
    lease_id = _lease(clean_db, stream)
    epochs = _current(clean_db)
    stop = threading.Event()
    more = threading.Thread(target=_keep_writing, args=(clean_db, stop))
    more.start()
    try:
        with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
            export = begin(conn, lease_id, "test", 1)
        done = write(
            clean_db.resolver_dsn, store, _slow(_epoch_of(epochs), clean_db), export.export_id, 50
        )
    finally:
        stop.set()
        more.join()
        epochs.close()
    assert done.status == "ready", (done.error_code, done.error_message)
    assert done.position is not None and done.manifest_key and done.manifest_sha256
    manifest, exported = _exported(store, done.manifest_key, done.manifest_sha256)
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        committed = conn.execute("SELECT position FROM stream_cursor").fetchone()[0]  # type: ignore[index]
        pin = conn.execute(
            "SELECT pinned_position FROM rebuild_lease WHERE lease_id = %s", (lease_id,)
        ).fetchone()[0]  # type: ignore[index]
    assert committed > done.position, "the writers committed during the export"
    assert pin == done.position == manifest.position  # the lease pins W
    assert len(manifest.chunks) == done.chunks > 1 and manifest.records == done.records
    assert exported == _replay(clean_db, stream, done.position)
    assert set(manifest.by_aggregate) >= {"catalog_item", "listing_mapping", "shipping_policy"}


def test_a_corrupted_chunk_or_manifest_is_refused(
    clean_db: DatabaseSettings, store: ExportStore
) -> None:
    _workload(clean_db, 60)
    stream = StreamId(TENANT, CATALOG, 1)
    epochs = _current(clean_db)
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        export = begin(conn, _lease(clean_db, stream), "test", 1)
    done = write(clean_db.resolver_dsn, store, _epoch_of(epochs), export.export_id, 1000)
    epochs.close()
    assert done.manifest_key and done.manifest_sha256
    manifest = Manifest.from_bytes(store.get(done.manifest_key), done.manifest_sha256)
    chunk = manifest.chunks[0]
    data = bytearray(store.get(chunk.key))
    data[-1] ^= 0xFF
    store.put(chunk.key, bytes(data))
    with pytest.raises(ExportCorrupt, match="checksum"):
        check_chunk(store.get(chunk.key), chunk.sha256, chunk.records)
    with pytest.raises(ExportCorrupt, match="checksum"):
        Manifest.from_bytes(store.get(done.manifest_key) + b" ", done.manifest_sha256)


def test_an_export_under_a_lease_that_expired_meanwhile_fails_and_never_becomes_ready(
    clean_db: DatabaseSettings, store: ExportStore
) -> None:
    _workload(clean_db, 60)
    stream = StreamId(TENANT, CATALOG, 1)
    lease_id = _lease(clean_db, stream)
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        export = begin(conn, lease_id, "test", 1)
        conn.execute(
            "UPDATE rebuild_lease SET expires_at = clock_timestamp() - interval '1 second'"
            " WHERE lease_id = %s",
            (lease_id,),
        )
    epochs = _current(clean_db)
    done = write(clean_db.resolver_dsn, store, _epoch_of(epochs), export.export_id, 1000)
    epochs.close()
    assert (done.status, done.error_code) == ("failed", "LEASE_EXPIRED")


def test_an_epoch_change_during_the_export_fails_it(
    clean_db: DatabaseSettings, store: ExportStore
) -> None:
    _workload(clean_db, 60)
    stream = StreamId(TENANT, CATALOG, 1)
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        export = begin(conn, _lease(clean_db, stream), "test", 1)
    done = write(clean_db.resolver_dsn, store, lambda _s: 2, export.export_id, 1000)
    assert (done.status, done.error_code) == ("failed", "EXPORT_EPOCH_CHANGED")


TOKEN = "exporting-token"


@pytest.fixture()
def client(clean_db: DatabaseSettings, services: dict[str, str]) -> Iterator[TestClient]:
    settings = ApiSettings(
        api_tokens=SecretStr(f"{token_hash(TOKEN)}:{TENANT}"),
        resolver_dsn=clean_db.resolver_dsn,
        control_dsn=clean_db.control_dsn,
    )
    with TestClient(
        create_app(settings), headers={"Authorization": f"Bearer {TOKEN}"}
    ) as test_client:
        yield test_client


def test_the_api_starts_an_export_and_reports_it_ready(
    clean_db: DatabaseSettings, client: TestClient, store: ExportStore
) -> None:
    _workload(clean_db, 80)
    stream = StreamId(TENANT, CATALOG, 1)
    lease_id = _lease(clean_db, stream)
    started = client.post("/v1/exports", json={"lease_id": str(lease_id)})
    assert started.status_code == 202, started.text
    export_id = started.json()["export_id"]
    deadline = time.monotonic() + 60
    while (body := client.get(f"/v1/exports/{export_id}").json())["status"] == "writing":
        assert time.monotonic() < deadline, body
    assert body["status"] == "ready", body
    _, exported = _exported(store, body["manifest_key"], body["manifest_sha256"])
    assert exported == _replay(clean_db, stream, body["position"])

    unknown = client.get(f"/v1/exports/{uuid.uuid4()}")
    assert (unknown.status_code, unknown.json()["code"]) == (404, "EXPORT_NOT_FOUND")
    gone = client.post("/v1/exports", json={"lease_id": str(uuid.uuid4())})
    assert (gone.status_code, gone.json()["code"]) == (404, "LEASE_NOT_FOUND")


def test_retention_keeps_the_newest_ready_exports_and_those_in_use(
    clean_db: DatabaseSettings, store: ExportStore
) -> None:
    _workload(clean_db, 40)
    stream = StreamId(TENANT, CATALOG, 1)
    epochs = _current(clean_db)
    made = []
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        for _ in range(4):
            lease_id = _lease(clean_db, stream)
            export = begin(conn, lease_id, "test", 1)
            made.append(
                write(clean_db.resolver_dsn, store, _epoch_of(epochs), export.export_id, 10)
            )
            leases.release(conn, lease_id)
        in_use = begin(conn, _lease(clean_db, stream), "test", 1)  # its lease stays live
        made.append(write(clean_db.resolver_dsn, store, _epoch_of(epochs), in_use.export_id, 10))
        stale = begin(conn, _lease(clean_db, stream), "test", 1)
        fresh = begin(conn, _lease(clean_db, stream), "test", 1)
        conn.execute(
            "UPDATE snapshot_export SET heartbeat_at = clock_timestamp() - interval '1 hour'"
            " WHERE export_id = %s",
            (stale.export_id,),
        )
        conn.execute(
            "UPDATE snapshot_export SET created_at = created_at - interval '1 day'"
            " WHERE export_id = %s",
            (made[-1].export_id,),
        )  # the one in use is the oldest now: only its live lease keeps it
        swept = sweep_exports(conn, store, keep=2, stale_seconds=60)
        status = {r.export_id: r.status for r in sql.exports_of(conn, stream)}
    epochs.close()
    assert all(r.status == "ready" for r in made)
    assert status[made[0].export_id] == status[made[1].export_id] == "deleted"
    assert status[made[2].export_id] == status[made[3].export_id] == "ready"
    assert status[in_use.export_id] == "ready"
    assert status[stale.export_id] == "deleted" and status[fresh.export_id] == "writing"
    assert (swept.deleted, swept.abandoned) == (3, 1)
    for row in made[:2]:
        assert store.keys(prefix(stream, str(row.export_id))) == []
    assert store.keys(prefix(stream, str(made[2].export_id)))
    # a writer of the abandoned export that wakes up finds it no longer writing
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        assert not sql.heartbeat(conn, stale.export_id, 1, 1)
