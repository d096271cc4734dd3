"""Export retention: keep the last few ready exports per stream, delete the rest.

Per stream, newest first: the ``GAPLESS_EXPORTS_KEEP`` newest ready exports stay;
an older ready one goes, and so does every failed one and every writing one whose
heartbeat stopped ``GAPLESS_EXPORT_STALE_SECONDS`` ago (its writer died; it is
first marked failed ``EXPORT_ABANDONED``, so a writer that wakes up finds it no
longer writing and stops). An export whose lease is still live is never deleted:
a rebuild may be loading it.

Deleting one export: 1. delete every object under its prefix; 2. mark the row
deleted. A crash between the two leaves a row whose objects are gone; the next
pass deletes nothing more and marks it. A row marked deleted is kept (as history)
for ``GAPLESS_EXPORT_ROWS_RETENTION_SECONDS``, then deleted (``db.resolver.sweeps``).

Each pass also looks through part of the bucket (``ORPHAN_PAGES`` pages of keys, going
on where the last pass stopped, from the first key again once it reached the end)
for orphans: objects of an export that has no row, or only a deleted one (a
restored resolver database forgot it; a writer that stopped and woke up put a
chunk after retention had deleted its export). Those last written more than
``GAPLESS_EXPORT_STALE_SECONDS`` ago are deleted; an export's row is written before
any of its objects, so a live export's objects always find their row.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

import psycopg
from botocore.exceptions import BotoCoreError, ClientError

from db.resolver import exports as sql
from db.resolver import retention as retention_sql
from db.resolver import sweeps
from db.resolver.exports import ExportRow
from producers.exports.settings import ExportSettings
from producers.exports.store import ExportStore
from schemas.errors import GaplessError
from schemas.exports import prefix

log = logging.getLogger(__name__)


ORPHAN_PAGES = 10
"""Pages of (at most 1,000) keys one pass looks through for orphans."""

_ROOT = "exports/"


@dataclass(frozen=True, slots=True)
class ExportsSwept:
    deleted: int
    abandoned: int
    objects: int
    rows: int = 0
    """Rows of exports deleted long ago, gone."""
    orphans: int = 0
    """Objects no export row wants, gone."""


@dataclass(slots=True)
class OrphanScan:
    """Where the next look through the bucket for orphans starts (after this key)."""

    after: str = ""


def _export_id(key: str) -> uuid.UUID | None:
    """The export an object's key names (``schemas.exports.prefix``), if it is one."""
    parts = key.split("/")
    if len(parts) != 6 or parts[0] != _ROOT.rstrip("/"):
        return None
    try:
        return uuid.UUID(parts[4])
    except ValueError:
        return None


def sweep_orphans(
    conn: psycopg.Connection,
    store: ExportStore,
    grace_seconds: float,
    scan: OrphanScan,
    pages: int = ORPHAN_PAGES,
) -> int:
    """Delete the orphans among the next ``pages`` pages of keys; returns how many."""
    deleted = 0
    for _ in range(pages):
        found, more = store.page(_ROOT, scan.after)
        named = {key: _export_id(key) for key, _ in found}
        kept = sweeps.kept_exports(conn, sorted({i for i in named.values() if i is not None}))
        now = datetime.now(UTC)
        orphans = [
            key
            for key, written in found
            if (export_id := named[key]) is not None
            and export_id not in kept
            and (now - written).total_seconds() >= grace_seconds
        ]
        store.delete_keys(orphans)
        deleted += len(orphans)
        scan.after = more or ""
        if more is None:
            break
    if deleted:
        log.info("export objects no export row wants: %d deleted", deleted)
    return deleted


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
    rows_seconds: float = 30 * 86_400.0
    batch: int = 1000
    scan: OrphanScan = field(default_factory=OrphanScan)

    @classmethod
    def from_settings(cls, settings: ExportSettings) -> ExportRetention:
        return cls(
            ExportStore.from_settings(settings),
            settings.exports_keep,
            settings.export_stale_seconds,
            settings.export_rows_retention_seconds,
        )

    def sweep(self, conn: psycopg.Connection) -> ExportsSwept | None:
        """One pass: exports, then rows deleted long ago, then orphans. An object
        store that does not answer only defers it (logged), it never stops the
        retention loop. Database errors go to the loop's own reconnect."""
        try:
            swept = sweep_exports(conn, self.store, self.keep, self.stale_seconds)
            rows = sweeps.deleted_exports(conn, self.rows_seconds, self.batch)
            orphans = sweep_orphans(conn, self.store, self.stale_seconds, self.scan)
        except (GaplessError, BotoCoreError, ClientError) as exc:
            log.warning("export retention deferred: %s", exc)
            return None
        if swept.deleted:
            log.info("exports deleted: %d (%d abandoned)", swept.deleted, swept.abandoned)
        return ExportsSwept(swept.deleted, swept.abandoned, swept.objects, rows, orphans)
