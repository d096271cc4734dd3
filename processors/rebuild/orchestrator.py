"""The rebuild state machine, one committed step at a time.

``advance`` moves one rebuild on by at most one phase, under a claim that keeps other
workers off it (a claim expires when its worker dies, and another worker takes over
from the last committed phase):

- requested -> leased: take a lease pinned at the stream's pruned-through position;
- leased -> exporting: ask the resolver for an export under that lease;
- exporting -> loading: once the export is ready (renewing the lease while waiting),
  pick a new generation and record W and the chunk count;
- loading -> catching_up: load the export (``processors.rebuild.load``).

Each transition is one UPDATE of the rebuild row, committed before the next step
starts. A crash between a call to the resolver and that UPDATE leaves the earlier
phase: the step runs again (a second lease or export, the first left to expire and
to export retention). When the lease is gone (``410``: expired, released, epoch no
longer current), the export failed or its writer went quiet, the rebuild starts
over with a new lease and export, as attempt n + 1, up to ``max_attempts``; then it
fails with the reason. A corrupted export fails it at once (``EXPORT_CORRUPT``):
serving never saw any of it. Catching up and cutting over are the next phases; a
rebuild stops at ``catching_up`` until they exist.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from db import rebuilds as sql
from db.rebuilds import RebuildRow
from processors.exceptions import RetainedEventsGone
from processors.rebuild.exceptions import RebuildNotFound
from processors.rebuild.load import Fetch, load, read_manifest
from processors.resolver_client import ResolverClient
from schemas.errors import GaplessError

log = logging.getLogger(__name__)


@dataclass
class Orchestrator:
    product_dsn: str
    client: ResolverClient
    fetch: Fetch
    worker: str
    lease_ttl_seconds: int = 300
    claim_seconds: float = 60.0
    max_attempts: int = 3
    stale_export_seconds: float = 120.0
    on_change: Callable[[RebuildRow], None] = lambda _row: None

    def _update(self, rebuild_id: uuid.UUID, phase: str, **changes: object) -> RebuildRow:
        with psycopg.connect(self.product_dsn) as conn:
            row = sql.update(conn, rebuild_id, phase, **changes)
        self.on_change(row)
        return row

    def advance(self, rebuild_id: uuid.UUID) -> RebuildRow | None:
        """One step of one rebuild; None if another worker holds it."""
        with psycopg.connect(self.product_dsn) as conn:
            if not sql.claim(conn, rebuild_id, self.worker, self.claim_seconds):
                return None
            row = sql.get(conn, rebuild_id)
        if row is None:
            raise RebuildNotFound(f"no rebuild {rebuild_id}")
        try:
            return self._step(row)
        except RetainedEventsGone as exc:
            return self._restart(row, "LEASE_GONE", str(exc))
        except GaplessError as exc:
            if exc.code == "RESOLVER_UNAVAILABLE":
                log.warning("rebuild %s waits for the resolver: %s", rebuild_id, exc)
                return row
            return self._update(
                rebuild_id, "failed", error_code=exc.code, error_message=str(exc)[:2000]
            )

    def _step(self, row: RebuildRow) -> RebuildRow:
        rid = row.rebuild_id
        if row.phase == "requested":
            lease = self.client.create_lease(row.stream, f"rebuild:{rid}", self.lease_ttl_seconds)
            return self._update(rid, "leased", lease_id=uuid.UUID(lease["lease_id"]))
        assert row.lease_id is not None, "a leased rebuild has its lease"
        self.client.renew_lease(str(row.lease_id), self.lease_ttl_seconds)
        if row.phase == "leased":
            export = self.client.start_export(str(row.lease_id))
            return self._update(rid, "exporting", export_id=uuid.UUID(export["export_id"]))
        assert row.export_id is not None, "an exporting rebuild has its export"
        export = self.client.export(str(row.export_id))
        if row.phase == "exporting":
            if export["status"] == "ready":
                with psycopg.connect(self.product_dsn) as conn:
                    generation = sql.next_generation(
                        conn, row.stream.tenant_id, row.stream.catalog_id
                    )
                return self._update(
                    rid,
                    "loading",
                    generation=generation,
                    export_position=int(export["position"]),
                    chunks_total=int(export["chunks"]),
                )
            if export["status"] == "writing" and export["idle_seconds"] < self.stale_export_seconds:
                return row  # still being written
            return self._restart(
                row,
                str(export.get("error_code") or "EXPORT_ABANDONED"),
                str(export.get("error_message") or "the export's writer went quiet"),
            )
        if row.phase == "loading":
            manifest = read_manifest(self.fetch, export["manifest_key"], export["manifest_sha256"])

            def progress(_chunks: int, _rows: int) -> None:
                with psycopg.connect(self.product_dsn) as conn:
                    sql.claim(conn, rid, self.worker, self.claim_seconds)
                self.client.renew_lease(str(row.lease_id), self.lease_ttl_seconds)

            load(self.product_dsn, rid, manifest, self.fetch, progress)
            with psycopg.connect(self.product_dsn) as conn:
                done = sql.get(conn, rid)
            assert done is not None
            self.on_change(done)
            return done
        return row  # catching_up and later: the next phases

    def _restart(self, row: RebuildRow, code: str, message: str) -> RebuildRow:
        """Start over with a new lease and export, or fail once attempts run out. The
        generation a previous attempt loaded stays recorded, so the next attempt loads a
        new one (never on top of half an older export)."""
        if row.attempt >= self.max_attempts:
            return self._update(
                row.rebuild_id,
                "failed",
                error_code=code,
                error_message=f"attempt {row.attempt} of {self.max_attempts}: {message}"[:2000],
            )
        log.warning(
            "rebuild %s starts over (attempt %d): %s", row.rebuild_id, row.attempt + 1, message
        )
        return self._update(
            row.rebuild_id,
            "requested",
            attempt=row.attempt + 1,
            lease_id=None,
            export_id=None,
            export_position=None,
            chunks_total=0,
            chunks_loaded=0,
            rows_loaded=0,
            error_code=code,
            error_message=message[:2000],
        )
