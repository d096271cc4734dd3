"""An export spools its snapshot to a local file and closes the snapshot before any
chunk goes to the bucket, against real PostgreSQL and the S3 server: while a put is
held, no connection of the resolver database has a transaction open or an xmin
horizon, the objects are byte for byte what the snapshot's ``COPY`` sent cut into
chunks, and the spool file is gone afterwards (a spool a crash left behind goes when
the runner starts)."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import psycopg
import pytest
from botocore.exceptions import ClientError

from db.resolver import exports as sql
from db.resolver.exports import ExportRow
from db.resolver.retained_events import begin_snapshot
from db.settings import DatabaseSettings
from infra.config import ConfigurationError, load
from producers.exports.export import PUTS_AT_ONCE, begin, write
from producers.exports.runner import ExportRunner
from producers.exports.settings import ExportSettings
from producers.exports.store import ExportStore
from schemas.exports import Manifest
from schemas.ids import StreamId
from tests.integration.producers.exports.test_export import (
    CATALOG,
    TENANT,
    _current,
    _epoch_of,
    _lease,
    _workload,
)

CHUNK = 40


class HeldStore(ExportStore):
    """The bucket, with the first chunk's put held until the test lets it go."""

    def __init__(self, inner: ExportStore) -> None:
        super().__init__(inner._client, inner.bucket)
        self.putting = threading.Event()
        self.go_on = threading.Event()

    def put(self, key: str, data: bytes) -> None:
        if not self.putting.is_set():
            self.putting.set()
            assert self.go_on.wait(60), "the test never let the put go on"
        super().put(key, data)


def _open_snapshots(dsn: str) -> list[tuple[object, ...]]:
    """Every other client connection of the database holding a transaction or an
    xmin horizon."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT pid, state, xact_start, backend_xmin FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend'"
            " AND (xact_start IS NOT NULL OR backend_xmin IS NOT NULL)"
        ).fetchall()


def _copied(dsn: str, chunk: int) -> list[bytes]:
    """What the export read: every kind's ``COPY`` blocks, cut every ``chunk`` lines
    and where the kind changes."""
    chunks: list[bytes] = []
    with psycopg.connect(dsn) as conn, conn.transaction():
        begin_snapshot(conn)
        for _kind, query in sql.STATE:
            lines = [bytes(b) for b in sql.copy_state(conn, query, TENANT, CATALOG)]
            chunks += [b"".join(lines[i : i + chunk]) for i in range(0, len(lines), chunk)]
    return chunks


def test_the_upload_holds_no_snapshot_and_puts_what_the_snapshot_read(
    clean_db: DatabaseSettings, tmp_path: Path
) -> None:
    _workload(clean_db, 200)
    store = HeldStore(ExportStore.from_settings(ExportSettings()))
    stream = StreamId(TENANT, CATALOG, 1)
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        export = begin(conn, _lease(clean_db, stream), "test", 1)
    epochs = _current(clean_db)
    done: list[ExportRow] = []
    writer = threading.Thread(
        target=lambda: done.append(
            write(
                clean_db.resolver_dsn,
                store,
                _epoch_of(epochs),
                export.export_id,
                CHUNK,
                str(tmp_path),
            )
        )
    )
    writer.start()
    try:
        assert store.putting.wait(60), "no chunk was put"
        spooled = list(tmp_path.iterdir())
        held = _open_snapshots(clean_db.resolver_owner_dsn)
    finally:
        store.go_on.set()
        writer.join(60)
        epochs.close()
    assert held == [], "a snapshot stays open while the bucket takes the chunks"
    assert [p.name for p in spooled] == [f"gapless-export-{export.export_id}.spool"]
    assert list(tmp_path.iterdir()) == [], "the spool is deleted once the export ends"
    (row,) = done
    assert row.status == "ready", (row.error_code, row.error_message)
    assert row.manifest_key and row.manifest_sha256
    manifest = Manifest.from_bytes(store.get(row.manifest_key), row.manifest_sha256)
    expected = _copied(clean_db.resolver_owner_dsn, CHUNK)
    assert len(expected) > 2
    assert [store.get(c.key) for c in manifest.chunks] == expected
    assert manifest.records == row.records == sum(c.count(b"\n") for c in expected)


def test_a_spool_left_behind_goes_when_the_runner_starts_and_a_bad_directory_stops_it(
    clean_db: DatabaseSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    left = tmp_path / f"gapless-export-{uuid.uuid4()}.spool"
    left.write_bytes(b"{}\n")
    other = tmp_path / "not-a-spool"
    other.write_bytes(b"x")
    monkeypatch.setenv("GAPLESS_EXPORT_SPOOL_DIR", str(tmp_path))
    runner = ExportRunner(clean_db.resolver_dsn, clean_db.control_dsn, load(ExportSettings))
    runner.close()
    assert list(tmp_path.iterdir()) == [other]

    monkeypatch.setenv("GAPLESS_EXPORT_SPOOL_DIR", str(tmp_path / "missing"))
    with pytest.raises(ConfigurationError, match=r"GAPLESS_EXPORT_SPOOL_DIR: .*not a directory"):
        load(ExportSettings)


class RefusingStore(ExportStore):
    """The bucket, refusing the put of one chunk (and counting every put begun)."""

    def __init__(self, inner: ExportStore, refused: int) -> None:
        super().__init__(inner._client, inner.bucket)
        self.refused = f"chunk-{refused:06d}."
        self.begun: list[str] = []
        self._lock = threading.Lock()

    def put(self, key: str, data: bytes) -> None:
        with self._lock:
            self.begun.append(key)
        if self.refused in key:
            raise ClientError({"Error": {"Code": "InternalError", "Message": "no"}}, "PutObject")
        super().put(key, data)


def test_a_refused_put_fails_the_export_and_no_later_put_begins(
    clean_db: DatabaseSettings, tmp_path: Path
) -> None:
    """At most ``PUTS_AT_ONCE`` puts under way; the third is refused: the export ends
    ``failed`` with the store's error, without a manifest, no put begins past those
    under way when the failure is seen, and the spool is deleted."""
    _workload(clean_db, 200)
    store = RefusingStore(ExportStore.from_settings(ExportSettings()), refused=3)
    stream = StreamId(TENANT, CATALOG, 1)
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        export = begin(conn, _lease(clean_db, stream), "test", 1)
    epochs = _current(clean_db)
    try:
        row = write(
            clean_db.resolver_dsn, store, _epoch_of(epochs), export.export_id, 5, str(tmp_path)
        )
    finally:
        epochs.close()
    assert (row.status, row.error_code) == ("failed", "ClientError")
    assert row.manifest_key is None
    numbers = sorted(int(k.rsplit("chunk-", 1)[1].split(".")[0]) for k in store.begun)
    assert 3 in numbers
    # at most PUTS_AT_ONCE under way from the one awaited: none begun past that
    assert max(numbers) <= 3 + PUTS_AT_ONCE - 1
    assert len(_copied(clean_db.resolver_owner_dsn, 5)) > 3 + PUTS_AT_ONCE
    assert list(tmp_path.iterdir()) == []
