"""Export retention: keep the last few ready exports per stream, delete the rest.

Per stream, newest first: the ``GAPLESS_EXPORTS_KEEP`` newest ready exports stay;
an older ready one goes, and so does every failed one and every writing one whose
heartbeat stopped ``GAPLESS_EXPORT_STALE_SECONDS`` ago (its writer died; it is
first marked failed ``EXPORT_ABANDONED``, so a writer that wakes up finds it no
longer writing and stops). An export whose lease is still live is never deleted:
a rebuild may be loading it.

Deleting one export: 1. delete every object under its prefix; 2. mark the row
deleted. A crash between the two leaves a row whose objects are gone; the next
pass deletes nothing more and marks it. Rows are kept (as history), objects not.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psycopg
from botocore.exceptions import BotoCoreError, ClientError

from db import exports as sql
from db import retention as retention_sql
from db.exports import ExportRow
from producers.exports.settings import ExportSettings
from producers.exports.store import ExportStore
from schemas.errors import GaplessError
from schemas.exports import prefix

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ExportsSwept:
    deleted: int
    abandoned: int
    objects: int


def _lease_live(conn: psycopg.Connection, row: ExportRow) -> bool:
    lease = retention_sql.get_lease(conn, row.lease_id)
    return lease is not None and lease.released_at is None and not lease.expired


def doomed(rows: list[ExportRow], keep: int, stale_seconds: float) -> list[ExportRow]:
    """Which of one stream's exports (newest first) retention deletes, before the
    lease check."""
    ready = [r for r in rows if r.status == "ready"]
    out = ready[keep:]
    out += [r for r in rows if r.status == "failed"]
    out += [r for r in rows if r.status == "writing" and r.idle_seconds >= stale_seconds]
    return out


def sweep_exports(
    conn: psycopg.Connection, store: ExportStore, keep: int, stale_seconds: float
) -> ExportsSwept:
    """One pass over every stream with exports (autocommit connection)."""
    deleted = abandoned = objects = 0
    for stream in sql.streams_with_exports(conn):
        for row in doomed(sql.exports_of(conn, stream), keep, stale_seconds):
            if _lease_live(conn, row) and row.status != "writing":
                continue  # a rebuild may be loading it
            if row.status == "writing":
                if not sql.mark_failed(
                    conn, row.export_id, "EXPORT_ABANDONED", "no heartbeat: its writer stopped"
                ):
                    continue  # it moved on meanwhile
                abandoned += 1
            objects += store.delete_prefix(prefix(stream, str(row.export_id)))
            sql.mark_deleted(conn, row.export_id)
            deleted += 1
            log.info("export %s of %s deleted (%s)", row.export_id, stream, row.status)
    return ExportsSwept(deleted, abandoned, objects)


@dataclass(frozen=True, slots=True)
class ExportRetention:
    """What the retention service needs to sweep exports on every pass."""

    store: ExportStore
    keep: int
    stale_seconds: float

    @classmethod
    def from_settings(cls, settings: ExportSettings) -> ExportRetention:
        return cls(
            ExportStore.from_settings(settings),
            settings.exports_keep,
            settings.export_stale_seconds,
        )

    def sweep(self, conn: psycopg.Connection) -> ExportsSwept | None:
        """One pass; an object store that does not answer only defers it (logged),
        it never stops the retention loop. Database errors go to the loop's own
        reconnect."""
        try:
            swept = sweep_exports(conn, self.store, self.keep, self.stale_seconds)
        except (GaplessError, BotoCoreError, ClientError) as exc:
            log.warning("export retention deferred: %s", exc)
            return None
        if swept.deleted:
            log.info("exports deleted: %d (%d abandoned)", swept.deleted, swept.abandoned)
        return swept
