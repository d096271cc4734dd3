"""The pruner's sweeps of the resolver database and the exports bucket, against real
PostgreSQL (as the services' login) and the S3 server: export rows deleted long ago
go, the others stay; ended leases go once retention passed and no export row names
them, live and recent ones stay; objects no export row wants go once old enough,
those of a kept export and keys that name no export stay; every delete goes in
bounded batches."""

from __future__ import annotations

import uuid
from datetime import timedelta

import psycopg
import pytest

from db import batched_delete
from db.resolver import exports as sql
from db.resolver import sweeps
from db.settings import DatabaseSettings
from producers.exports.retention import ExportRetention, OrphanScan, sweep_orphans
from producers.exports.settings import ExportSettings
from producers.exports.store import ExportStore
from producers.retention import leases
from producers.retention.service import prune_once
from producers.retention.settings import RetentionSettings
from schemas.exports import chunk_key
from schemas.ids import StreamId

STREAM = StreamId("sweeps", "c1", 1)
DAY = 86_400.0


def _lease(conn: psycopg.Connection, *, ended_days_ago: float | None, released: bool) -> uuid.UUID:
    lease_id = leases.create(conn, STREAM, "test-rebuild", 600).lease_id
    if ended_days_ago is not None:
        column = "released_at" if released else "expires_at"
        conn.execute(
            f"UPDATE rebuild_lease SET {column} = clock_timestamp() - %s WHERE lease_id = %s",
            (timedelta(days=ended_days_ago), lease_id),
        )
    return lease_id


def _export(
    conn: psycopg.Connection, lease_id: uuid.UUID, status: str, days_ago: float = 0
) -> uuid.UUID:
    export_id = uuid.uuid4()
    sql.insert_export(conn, export_id, STREAM, lease_id, "test")
    if status == "deleted":
        conn.execute(
            "UPDATE snapshot_export SET status = 'deleted', deleted_at = clock_timestamp() - %s"
            " WHERE export_id = %s",
            (timedelta(days=days_ago), export_id),
        )
    return export_id


def _ids(conn: psycopg.Connection, table: str, column: str) -> set[uuid.UUID]:
    return {r[0] for r in conn.execute(f"SELECT {column} FROM {table}").fetchall()}


def test_the_prune_pass_sweeps_export_rows_and_ended_leases(clean_db: DatabaseSettings) -> None:
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        _lease(conn, ended_days_ago=10, released=True)  # these two go
        _lease(conn, ended_days_ago=10, released=False)
        released_lately = _lease(conn, ended_days_ago=1, released=True)
        live = _lease(conn, ended_days_ago=None, released=False)
        named_by_kept_row = _lease(conn, ended_days_ago=10, released=True)
        named_by_old_row = _lease(conn, ended_days_ago=10, released=True)
        _export(conn, named_by_old_row, "deleted", days_ago=40)
        recent_row = _export(conn, named_by_kept_row, "deleted", days_ago=1)
        ready = _export(conn, live, "writing")
    settings = RetentionSettings()
    exports = ExportRetention(
        ExportStore.from_settings(ExportSettings()), keep=3, stale_seconds=600.0
    )
    assert settings.lease_retention_seconds == 7 * DAY
    assert exports.rows_seconds == 30 * DAY

    prune_once(settings, exports.sweep)
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        assert _ids(conn, "snapshot_export", "export_id") == {recent_row, ready}
        # the old row went after the leases this pass: its lease goes next pass
        assert _ids(conn, "rebuild_lease", "lease_id") == {
            released_lately,
            live,
            named_by_kept_row,
            named_by_old_row,
        }
    prune_once(settings, exports.sweep)
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        assert _ids(conn, "rebuild_lease", "lease_id") == {
            released_lately,
            live,
            named_by_kept_row,
        }


def test_ended_leases_go_in_bounded_batches(
    clean_db: DatabaseSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        for _ in range(5):
            _lease(conn, ended_days_ago=10, released=True)
        monkeypatch.setattr(batched_delete, "MAX_BATCHES", 2)
        assert sweeps.ended_leases(conn, 7 * DAY, batch=2) == 4  # two batches of two
        assert sweeps.ended_leases(conn, 7 * DAY, batch=2) == 1  # the rest, next pass
        assert _ids(conn, "rebuild_lease", "lease_id") == set()


def test_objects_no_export_row_wants_go_once_old_enough(clean_db: DatabaseSettings) -> None:
    store = ExportStore.from_settings(ExportSettings())
    stream = StreamId(f"sweeps-{uuid.uuid4().hex[:8]}", "c1", 1)
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        lease_id = leases.create(conn, stream, "test-rebuild", 600).lease_id
        kept = uuid.uuid4()
        sql.insert_export(conn, kept, stream, lease_id, "test")
        gone = uuid.uuid4()
        sql.insert_export(conn, gone, stream, lease_id, "test")
        sql.mark_deleted(conn, gone)
        forgotten = uuid.uuid4()  # no row: a restored database forgot it
        keys = {
            name: [chunk_key(stream, str(export_id), n) for n in (1, 2)]
            for name, export_id in (("kept", kept), ("gone", gone), ("forgotten", forgotten))
        }
        stray = f"exports/{stream.tenant_id}/notes.txt"  # names no export
        every = {stray, *keys["kept"], *keys["gone"], *keys["forgotten"]}
        for key in every:
            store.put(key, b"{}\n")

        def present() -> set[str]:
            return set(store.keys(f"exports/{stream.tenant_id}/"))

        sweep_orphans(conn, store, 3600.0, OrphanScan())
        assert present() == every  # too young yet
        scan = OrphanScan()
        assert sweep_orphans(conn, store, 0.0, scan) >= 4
        assert scan.after == ""  # it reached the end: the next pass starts again
    assert present() == {*keys["kept"], stray}
