"""The rebuild state machine, one committed step at a time.

``advance`` moves one rebuild on by at most one phase, under a claim that keeps other
workers off it (a claim expires when its worker dies, and another worker takes over
from the last committed phase):

- requested -> leased: take a lease pinned at the stream's pruned-through position;
- leased -> exporting: ask the resolver for an export under that lease;
- exporting -> loading: once the export is ready (renewing the lease while waiting),
  pick a new generation and record W and the chunk count;
- loading -> catching_up: load the export (``processors.rebuild.load``);
- catching_up -> cutting_over: the shadow applies the events after W until its
  progress reaches the target H (``processors.rebuild.catchup``);
- cutting_over -> done: the atomic swap (``processors.rebuild.cutover``), then the
  lease is released and the rebuild finishes (``processors.rebuild.cleanup``
  removes the shadow's rows and the retired generation afterwards).

Each transition is one UPDATE of the rebuild row, committed before the next step
starts. A crash between a call to the resolver and that UPDATE leaves the earlier
phase: the step runs again (a second lease or export, the first left to expire and
to export retention). When the lease is gone (``410``: expired, released, epoch no
longer current), the resolver no longer knows the lease or the export (``404``
after a restore: ``ResolverForgot``), the export failed or its writer went quiet,
the rebuild starts over with a new lease and export, as attempt n + 1, up to
``max_attempts``; then it fails with the reason. A corrupted export fails it at
once (``EXPORT_CORRUPT``): serving never saw any of it. A shadow blocked below H
(a position it parked or quarantined) waits in ``catching_up`` with
``CATCHUP_BLOCKED`` and what holds it as its error, until an operator repairs the
shadow consumer's entry. A restart clears the previous attempt's shadow rows before
the new lease is taken, so nothing the shadow recorded for an older generation can
pass for done in the new one.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg

from db import rebuilds as sql
from db.epochs import EpochSource
from db.rebuilds import RebuildRow
from db.tables.rebuilds import FINAL_PHASES
from processors.applier.batch import Applier
from processors.exceptions import ResolverForgot, RetainedEventsGone
from processors.rebuild.catchup import catch_up
from processors.rebuild.cleanup import clear_shadow
from processors.rebuild.cutover import cut_over
from processors.rebuild.exceptions import RebuildNotFound, WrongPhase
from processors.rebuild.load import Fetch, load, read_manifest
from processors.resolver_client import ResolverClient
from schemas.codec import CODEC, EventCodec
from schemas.errors import GaplessError

CATCHUP_BLOCKED = "CATCHUP_BLOCKED"

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
    epochs: EpochSource | None = None
    codec: EventCodec = CODEC
    page_size: int = 2000
    catchup_budget_seconds: float = 10.0
    pause_budget_seconds: float = 2.0
    on_change: Callable[[RebuildRow], None] = lambda _row: None
    _shadows: dict[str, Applier] = field(default_factory=dict)

    def _update(self, row: RebuildRow, phase: str, **changes: object) -> RebuildRow:
        """Move ``row`` on from the phase it is in; WrongPhase if it is no longer in it
        (a cancel, or another worker, got there first)."""
        with psycopg.connect(self.product_dsn) as conn:
            moved = sql.move(conn, row.rebuild_id, row.phase, phase, **changes)
        if moved is None:
            raise WrongPhase(f"rebuild {row.rebuild_id} left phase {row.phase} meanwhile")
        self.on_change(moved)
        return moved

    def _epochs(self) -> EpochSource:
        assert self.epochs is not None, "catch-up and cutover need the control database"
        return self.epochs

    def shadow(self, row: RebuildRow) -> Applier:
        """The shadow's applier (one per shadow consumer, kept between steps)."""
        applier = self._shadows.get(row.shadow_consumer)
        if applier is None:
            applier = Applier(self.product_dsn, self._epochs(), self.codec, row.shadow_consumer)
            self._shadows[row.shadow_consumer] = applier
        return applier

    def _drop_shadow(self, row: RebuildRow) -> None:
        applier = self._shadows.pop(row.shadow_consumer, None)
        if applier is not None:
            applier.close()

    def close(self) -> None:
        for applier in self._shadows.values():
            applier.close()
        self._shadows.clear()

    def run(self, rebuild_id: uuid.UUID, max_steps: int = 8) -> RebuildRow | None:
        """Steps while each one moves the rebuild to another phase (so a phase that
        finishes at once does not wait for the next tick); stops when a step leaves it
        where it was (waiting: an export being written, a blocked catch-up), when it
        is finished, or when another worker holds it."""
        row = None
        for _ in range(max_steps):
            before = row.phase if row is not None else None
            row = self.advance(rebuild_id)
            if row is None or row.phase == before or row.phase in FINAL_PHASES:
                break
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
        except WrongPhase as exc:
            log.info("rebuild %s: %s", rebuild_id, exc)
            with psycopg.connect(self.product_dsn) as conn:
                return sql.get(conn, rebuild_id)
        except RetainedEventsGone as exc:
            return self._restart(self._current(row), "LEASE_GONE", str(exc))
        except ResolverForgot as exc:  # restored from before its lease or export: start over
            return self._restart(self._current(row), exc.resolver_code, str(exc))
        except GaplessError as exc:
            if exc.code == "RESOLVER_UNAVAILABLE":
                log.warning("rebuild %s waits for the resolver: %s", rebuild_id, exc)
                return row
            self._drop_shadow(row)
            return self._update(
                self._current(row), "failed", error_code=exc.code, error_message=str(exc)[:2000]
            )

    def _current(self, row: RebuildRow) -> RebuildRow:
        """The row as committed now (a step may have moved it on before it failed)."""
        with psycopg.connect(self.product_dsn) as conn:
            now = sql.get(conn, row.rebuild_id)
        if now is None:
            raise RebuildNotFound(f"no rebuild {row.rebuild_id}")
        return now

    def _step(self, row: RebuildRow) -> RebuildRow:
        rid = row.rebuild_id
        if row.phase == "requested":
            lease = self.client.create_lease(row.stream, f"rebuild:{rid}", self.lease_ttl_seconds)
            return self._update(row, "leased", lease_id=uuid.UUID(lease["lease_id"]))
        assert row.lease_id is not None, "a leased rebuild has its lease"
        if row.phase == "cutting_over" and row.previous_generation is not None:
            return self._finish(row, None)  # swapped before a crash: finish only
        self.client.renew_lease(str(row.lease_id), self.lease_ttl_seconds)
        if row.phase == "leased":
            export = self.client.start_export(str(row.lease_id))
            return self._update(row, "exporting", export_id=uuid.UUID(export["export_id"]))
        assert row.export_id is not None, "an exporting rebuild has its export"
        export = self.client.export(str(row.export_id))
        if row.phase == "exporting":
            if export["status"] == "ready":
                with psycopg.connect(self.product_dsn) as conn:
                    generation = sql.next_generation(
                        conn, row.stream.tenant_id, row.stream.catalog_id
                    )
                return self._update(
                    row,
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
        if row.phase == "catching_up":
            return self._catch_up(row)
        if row.phase == "cutting_over":
            return self._cut_over(row)
        raise WrongPhase(f"rebuild {rid} is {row.phase}: nothing to do")

    def _keep_alive(self, row: RebuildRow) -> None:
        with psycopg.connect(self.product_dsn) as conn:
            sql.claim(conn, row.rebuild_id, self.worker, self.claim_seconds)
        self.client.renew_lease(str(row.lease_id), self.lease_ttl_seconds)

    def _catch_up(self, row: RebuildRow) -> RebuildRow:
        """Catch-up rounds within the budget; on to ``cutting_over`` once the shadow
        reached the target (recorded the first time it is chosen)."""
        assert row.lease_id is not None
        result = catch_up(
            self.client,
            self.shadow(row),
            str(row.lease_id),
            row.stream,
            row.target_position,
            page_size=self.page_size,
            budget_seconds=self.catchup_budget_seconds,
            on_page=lambda _p: self._keep_alive(row),
        )
        if result.caught_up:
            return self._update(
                row,
                "cutting_over",
                target_position=result.target,
                caught_up_position=result.progress,
                error_code=None,
                error_message=None,
            )
        changes: dict[str, object] = {
            "target_position": result.target,
            "caught_up_position": result.progress,
        }
        if result.blocker is not None:
            changes.update(error_code=CATCHUP_BLOCKED, error_message=result.blocker)
            log.warning("rebuild %s: %s", row.rebuild_id, result.blocker)
        if (
            result.progress == row.caught_up_position
            and result.target == row.target_position
            and result.blocker == row.error_message
        ):
            return row  # nothing new to record
        return self._update(row, "catching_up", **changes)

    def _cut_over(self, row: RebuildRow) -> RebuildRow:
        """Catch up to the stream's committed position unpaused, then the swap (which
        catches up only what was committed since, while paused)."""
        assert row.lease_id is not None
        shadow = self.shadow(row)
        before = catch_up(
            self.client,
            shadow,
            str(row.lease_id),
            row.stream,
            None,
            page_size=self.page_size,
            budget_seconds=self.catchup_budget_seconds,
            on_page=lambda _p: self._keep_alive(row),
        )
        if not before.caught_up:
            return self._update(
                row, "catching_up", target_position=None, caught_up_position=before.progress
            )
        tenant, catalog = row.stream.tenant_id, row.stream.catalog_id
        done = cut_over(
            self.product_dsn,
            self.client,
            shadow,
            row.rebuild_id,
            lambda: self._epochs().epochs([(tenant, catalog)], refresh=True).get((tenant, catalog)),
            page_size=self.page_size,
            pause_budget_seconds=self.pause_budget_seconds,
        )
        if done is None:
            log.info("rebuild %s: the live consumer got ahead; catching up again", row.rebuild_id)
            return row
        log.info(
            "rebuild %s cut over at %d (live was at %d, received through %d): paused %.1f ms",
            row.rebuild_id,
            done.target,
            done.live_before,
            done.received_through,
            done.pause_ms,
        )
        self.on_change(done.row)
        return self._finish(done.row, done.pause_ms)

    def _finish(self, row: RebuildRow, pause_ms: float | None) -> RebuildRow:
        """After the swap: release the lease, then ``done``. A crash between the two
        releases it again (idempotent)."""
        assert row.lease_id is not None
        self.client.release_lease(str(row.lease_id))  # idempotent, also once expired
        self._drop_shadow(row)
        changes: dict[str, object] = {"error_code": None, "error_message": None}
        if pause_ms is not None:
            changes["cutover_pause_ms"] = pause_ms
        return self._update(row, "done", **changes)

    def _restart(self, row: RebuildRow, code: str, message: str) -> RebuildRow:
        """Start over with a new lease and export, or fail once attempts run out. The
        generation a previous attempt loaded stays recorded, so the next attempt loads a
        new one (never on top of half an older export)."""
        self._drop_shadow(row)
        if row.attempt >= self.max_attempts:
            return self._update(
                row,
                "failed",
                error_code=code,
                error_message=f"attempt {row.attempt} of {self.max_attempts}: {message}"[:2000],
            )
        log.warning(
            "rebuild %s starts over (attempt %d): %s", row.rebuild_id, row.attempt + 1, message
        )
        with psycopg.connect(self.product_dsn, autocommit=True) as conn:
            clear_shadow(conn, row.shadow_consumer, f"attempt {row.attempt} started over")
        return self._update(
            row,
            "requested",
            attempt=row.attempt + 1,
            lease_id=None,
            export_id=None,
            export_position=None,
            target_position=None,
            caught_up_position=None,
            chunks_total=0,
            chunks_loaded=0,
            rows_loaded=0,
            error_code=code,
            error_message=message[:2000],
        )
