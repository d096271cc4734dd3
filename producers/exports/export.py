"""A snapshot export: the accepted state of one stream at its committed cursor W,
written as checksummed chunks and a manifest to the exports bucket.

``begin`` records the export under a live lease; ``write`` does the work (in the
API process's background, or wherever it is called):

1. open one ``REPEATABLE READ READ ONLY`` snapshot; read W, the stream's committed
   cursor, in it (never ``max(outbox.position)``), and stream every kind of
   accepted state out of it as PostgreSQL builds the records (``db.resolver.exports.STATE``:
   one ``COPY (SELECT json_build_object(…) … ORDER BY <key>) TO STDOUT`` per kind;
   the format is ``schemas.exports``'s); no row is decoded here. The lines go to
   the export's spool file (``producers.exports.spool``, in
   ``GAPLESS_EXPORT_SPOOL_DIR``), cut into chunks of ``export_chunk_records`` lines
   (PostgreSQL sends one row a block, so a chunk always ends at a line's end); each
   chunk cut records a heartbeat (0 chunks put, the records read so far);
2. close the snapshot. Nothing of the object store happens inside it: from here
   on the resolver holds no transaction and no xmin horizon for this export, however
   slowly the bucket takes it;
3. put each chunk from the spool (read back and checked against the SHA-256 taken
   when it was spooled), ``PUTS_AT_ONCE`` at a time, recording a heartbeat (chunks
   put, records) as each is known put;
4. advance the lease pin from P to W under the retention lock (refused, 410, if the
   lease expired or was released);
5. read the current epoch from the control database, uncached: it must still be
   the stream's (else ``EXPORT_EPOCH_CHANGED``);
6. put the manifest (every chunk's key, SHA-256, records, bytes);
7. in one transaction, under the retention lock: the lease must still be live,
   then the export becomes ``ready`` with W and the manifest's SHA-256.

The spool file is deleted when ``write`` returns, whatever happened. A crash before
7 leaves the row ``writing``, some objects and the spool file: the next start of the
resolver API deletes spools no live writer holds (a spool of the same export opened
again is overwritten); the row's heartbeat stops, the rebuild asks for a new export,
and retention abandons the old one after ``GAPLESS_EXPORT_STALE_SECONDS`` and deletes
its objects. A pin advanced in 4 for an export that never became ready only retains
events from W on, which the next export (at a W' >= W) needs anyway. A failure the
writer sees ends the row ``failed`` with its code. Only a ``ready`` export is ever
loaded, and only with the checksums its row and manifest hold.
"""

from __future__ import annotations

import logging
import tempfile
import uuid
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime

import psycopg
from botocore.exceptions import BotoCoreError, ClientError

from db.resolver import exports as sql
from db.resolver.exports import ExportRow
from db.resolver.retained_events import begin_snapshot
from producers.exports.exceptions import (
    ExportAbandoned,
    ExportEpochChanged,
    ExportNotFound,
)
from producers.exports.spool import ExportSpool
from producers.exports.store import ExportStore
from producers.retention import leases
from schemas.errors import GaplessError
from schemas.exports import ChunkEntry, Manifest, chunk_key, manifest_key, sha256
from schemas.ids import StreamId

log = logging.getLogger(__name__)

CurrentEpoch = Callable[[StreamId], int | None]


def begin(
    conn: psycopg.Connection,
    lease_id: uuid.UUID,
    requested_by: str,
    current_epoch: int | None,
) -> ExportRow:
    """Record a new export of the lease's stream; the lease must be live and its
    epoch current. One transaction; a crash leaves nothing."""
    with conn.transaction():
        lease = leases.find(conn, lease_id)
        leases.require_current_epoch(lease.stream, current_epoch)
        leases.require_usable(lease)
        return sql.insert_export(conn, uuid.uuid4(), lease.stream, lease_id, requested_by)


def find(conn: psycopg.Connection, export_id: uuid.UUID) -> ExportRow:
    row = sql.get_export(conn, export_id)
    if row is None:
        raise ExportNotFound(f"no export {export_id}")
    return row


def write(
    resolver_dsn: str,
    store: ExportStore,
    current_epoch: CurrentEpoch,
    export_id: uuid.UUID,
    chunk_records: int,
    spool_dir: str | None = None,
) -> ExportRow:
    """Write a begun export (the steps in the module docstring), spooled in
    ``spool_dir`` (default: the system's temporary directory); returns its row,
    ``ready`` or ``failed``. Never raises for a failure it can record."""
    with psycopg.connect(resolver_dsn, autocommit=True) as control:
        export = find(control, export_id)
        try:
            with ExportSpool.open(
                spool_dir or tempfile.gettempdir(), export_id, chunk_records
            ) as spool:
                _write(resolver_dsn, control, store, current_epoch, export, spool)
        except (GaplessError, psycopg.Error, BotoCoreError, ClientError) as exc:
            code = exc.code if isinstance(exc, GaplessError) else type(exc).__name__
            log.warning("export %s of %s failed: %s: %s", export_id, export.stream, code, exc)
            try:
                sql.mark_failed(control, export_id, code, str(exc))
            except psycopg.Error:
                log.exception("export %s: could not record the failure", export_id)
        return find(control, export_id)


PUTS_AT_ONCE = 4
"""Chunks put to the bucket at once (each read back from the spool and checked in its
own thread): a put waits mostly on the object store, so the puts overlap."""


def _put_chunks(
    store: ExportStore,
    spool: ExportSpool,
    stream: StreamId,
    export_id: uuid.UUID,
    beat: Callable[[int, int], None],
) -> list[ChunkEntry]:
    """Step 3: every spooled chunk put, at most ``PUTS_AT_ONCE`` under way (the next
    begins as the oldest is known put); a heartbeat as each is known put, in chunk
    order. The first failure cancels the puts not begun and is raised once those
    under way have ended, so no put reads the spool after ``write`` deletes it."""
    keys = [chunk_key(stream, str(export_id), n) for n in range(1, len(spool.chunks) + 1)]

    def put(index: int) -> None:
        store.put(keys[index], spool.read(spool.chunks[index]))

    entries: list[ChunkEntry] = []
    under_way: deque[Future[None]] = deque()
    pending = iter(range(len(keys)))
    with ThreadPoolExecutor(PUTS_AT_ONCE, thread_name_prefix="export-put") as pool:
        try:
            for number, (key, chunk) in enumerate(zip(keys, spool.chunks, strict=True), start=1):
                while len(under_way) < PUTS_AT_ONCE:
                    index = next(pending, None)
                    if index is None:
                        break
                    under_way.append(pool.submit(put, index))
                under_way.popleft().result()
                entries.append(
                    ChunkEntry(key, chunk.sha256, chunk.lines, chunk.length, chunk.kinds)
                )
                beat(number, spool.records)
        except BaseException:
            for later in under_way:
                later.cancel()
            raise
    return entries


def _write(
    resolver_dsn: str,
    control: psycopg.Connection,
    store: ExportStore,
    current_epoch: CurrentEpoch,
    export: ExportRow,
    spool: ExportSpool,
) -> None:
    stream, export_id = export.stream, export.export_id

    def beat(chunks: int, records: int) -> None:
        if not sql.heartbeat(control, export_id, chunks, records):
            raise ExportAbandoned(f"export {export_id} is no longer being written")

    by_aggregate: Counter[str] = Counter()
    # 1-2. one snapshot, spooled, and closed before anything goes to the bucket
    with psycopg.connect(resolver_dsn) as snap, snap.transaction():
        begin_snapshot(snap)
        position = sql.snapshot_cursor(snap, stream)
        for kind, query in sql.STATE:
            before = spool.records
            for block in sql.copy_state(snap, query, stream.tenant_id, stream.catalog_id):
                if spool.add(kind, block):
                    beat(0, spool.records)
            by_aggregate[kind] = spool.records - before
        spool.cut()
    # 3. the chunks, from the spool
    entries = _put_chunks(store, spool, stream, export_id, beat)
    records = spool.records
    # 4. the lease now pins W
    leases.advance(control, export.lease_id, position)
    # 5. the epoch is still the stream's
    leases_epoch = current_epoch(stream)
    if leases_epoch != stream.history_epoch:
        raise ExportEpochChanged(
            f"{stream}: the current epoch became {leases_epoch} while the export was written"
        )
    # 6. the manifest
    manifest = Manifest(
        export_id=str(export_id),
        tenant_id=stream.tenant_id,
        catalog_id=stream.catalog_id,
        history_epoch=stream.history_epoch,
        position=position,
        lease_id=str(export.lease_id),
        created_at=datetime.now(UTC).isoformat(),
        chunks=tuple(entries),
        records=records,
        by_aggregate=dict(sorted((k, n) for k, n in by_aggregate.items() if n)),
    )
    data = manifest.to_bytes()
    key = manifest_key(stream, str(export_id))
    store.put(key, data)
    # 7. ready, only while the lease is live
    with control.transaction():
        lease = leases.locked(control, export.lease_id)
        leases.require_usable(lease)
        if not sql.mark_ready(
            control, export_id, position, len(entries), records, key, sha256(data)
        ):
            raise ExportAbandoned(f"export {export_id} is no longer being written")
    log.info(
        "export %s of %s ready at %d: %d records in %d chunks",
        export_id,
        stream,
        position,
        records,
        len(entries),
    )
