"""Where exports run: a small thread pool in the resolver API process.

A request records the export and returns at once; the pool writes it. A crash of
the process leaves the export ``writing`` with its heartbeat stopped, which is what
the rebuild and export retention look for (``producers.exports.export``), and its
spool file, which the runner deletes when the process starts again.
"""

from __future__ import annotations

import uuid
from concurrent.futures import Future, ThreadPoolExecutor

from db.control.epochs import EpochSource
from db.resolver.exports import ExportRow
from producers.exports.export import write
from producers.exports.settings import ExportSettings
from producers.exports.spool import clear_left_behind
from producers.exports.store import ExportStore
from schemas.ids import StreamId


class ExportRunner:
    def __init__(self, resolver_dsn: str, control_dsn: str, settings: ExportSettings) -> None:
        self._dsn = resolver_dsn
        self._epochs = EpochSource(control_dsn)
        self._store = ExportStore.from_settings(settings)
        self._chunk_records = settings.export_chunk_records
        self._spool_dir = settings.export_spool_dir
        clear_left_behind(self._spool_dir)
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="export")

    def _current_epoch(self, stream: StreamId) -> int | None:
        pair = (stream.tenant_id, stream.catalog_id)
        return self._epochs.epochs([pair], refresh=True).get(pair)

    def submit(self, export_id: uuid.UUID) -> Future[ExportRow]:
        return self._pool.submit(
            write,
            self._dsn,
            self._store,
            self._current_epoch,
            export_id,
            self._chunk_records,
            self._spool_dir,
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._epochs.close()
