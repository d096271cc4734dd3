"""The rebuild state machine, one committed step at a time.

``advance`` moves one rebuild on by at most one phase, under a claim that keeps other
workers off it:

- requested -> leased: clear what an earlier attempt's shadow left (on a restart),
  then take a lease pinned at the stream's pruned-through position;
- leased -> exporting: ask the resolver for an export under that lease;
- exporting -> loading: once the export is ready (renewing the lease while waiting),
  pick a new generation and record W and the chunk count;
- loading -> catching_up: load the export (``processors.rebuild.load``);
- catching_up -> cutting_over: the shadow applies the events after W until its
  progress reaches the target H (``processors.rebuild.catchup``);
- cutting_over -> done: the atomic swap (``processors.rebuild.cutover``), then the
  lease is released and the rebuild finishes (``processors.rebuild.cleanup``
  removes the shadow's rows and the retired generation afterwards).

The claim is two things, taken together at the start of each step: the rebuild
row's ``claimed_by`` (renewed while the step works, for ``claim_seconds``) and a
session-level advisory lock per rebuild, held on a connection of the worker's own
(``db.leadership.Leaderships``) for as long as the rebuild is unfinished and the worker
carries it. The lock ends with the worker's session: when a worker dies (SIGKILL
included) PostgreSQL frees its locks at once, and the next worker to ask takes the
lock and with it the claim, whatever time the dead worker's claim had left. A worker
alive but stuck keeps its lock; its claim is taken over once it runs out, and the
stuck worker, when it wakes, finds the claim gone and stops (a worker holding the
lock may take the claim back at its next step: at most one more hand-over, never
two workers moving the row).

A step acts only from the phase it began in: every move of the row names that
phase, the attempt and the worker (``db.product.rebuilds.move``), so a step that finds the
rebuild cancelled, finished, restarted or claimed by another worker meanwhile
changes nothing. Between pages and chunks (``_keep_alive``) a step stops as soon
as its claim is lost (``RebuildClaimLost``) or the rebuild is finished (a cancel).
Once the swap is recorded, the rebuild only ever finishes: no move takes it back
to ``requested`` or to ``failed``.

Each transition is one UPDATE of the rebuild row, committed before the next step
starts. A crash between a call to the resolver and that UPDATE leaves the earlier
phase: the step runs again (a second lease or export, the first left to expire and
to export retention). When the lease is gone (``410``: expired, released, epoch no
longer current), the resolver no longer knows the lease or the export (``404``
after a restore: ``ResolverForgot``), the shadow's progress row is gone
(``SHADOW_PROGRESS_LOST``), the export failed or its writer went quiet, the rebuild
starts over with a new lease and export, as attempt n + 1, up to ``max_attempts``;
then it fails with the reason. A corrupted export fails it at once
(``EXPORT_CORRUPT``): serving never saw any of it. A shadow blocked below H (a
position it parked or quarantined) waits in ``catching_up`` with
``CATCHUP_BLOCKED`` and what holds it as its error, until an operator repairs the
shadow consumer's entry. A restart clears the previous attempt's shadow rows in the
``requested`` step, under the claim of the new attempt and before its lease is
taken (a crash between the two clears them again), so nothing the shadow recorded
for an older generation can pass for done in the new one. The shadow applies into
its rebuild's generation only (``db.product.rebuilds.shadow_generation``) and never makes
its own progress row, so a shadow whose row was cleared under it stops instead of
writing into a generation that may serve.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from psycopg.types.json import Jsonb

from db.control.epochs import EpochSource
from db.exceptions import RebuildClaimLost
from db.leadership import Leaderships
from db.product import rebuilds as sql
from db.product.rebuilds import RebuildRow
from db.tables.rebuilds import FINAL_PHASES
from processors.applier.batch import Applier
from processors.applier.exceptions import ShadowProgressLost
from processors.exceptions import ResolverForgot, ResolverUnavailable, RetainedEventsGone
from processors.rebuild.catchup import Throttle, catch_up
from processors.rebuild.cleanup import clear_shadow
from processors.rebuild.cutover import cut_over
from processors.rebuild.exceptions import RebuildNotFound, WrongPhase
from processors.rebuild.load import Fetch, load, read_manifest
from processors.resolver_client import ResolverClient
from schemas.codec import CODEC, EventCodec
from schemas.errors import GaplessError
from schemas.exceptions import RegistryUnavailable

CATCHUP_BLOCKED = "CATCHUP_BLOCKED"

log = logging.getLogger(__name__)


def lock_name(rebuild_id: uuid.UUID) -> str:
    """The advisory lock a worker holds while it carries the rebuild out."""
    return f"gapless.rebuild:{rebuild_id}"


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
    catchup_max_events_per_second: float = 0.0
    load_connections: int = 1
    """Export chunks a load copies at once, each on its own connection."""
    pause_budget_seconds: float = 2.0
    on_change: Callable[[RebuildRow], None] = lambda _row: None
    yield_to_live: Callable[[], float] = lambda: 0.0
    """Waits while the process's live consumers apply a batch (``processors.
    live_first``), before each catch-up page and each chunk loaded."""
    _shadows: dict[str, Applier] = field(default_factory=dict)
    _claims: Leaderships = field(init=False)

    def __post_init__(self) -> None:
        self._claims = Leaderships(self.product_dsn, f"rebuild-claims:{self.worker}")

    def _move(self, row: RebuildRow, phase: str, **changes: object) -> RebuildRow:
        """Move ``row`` on from the phase its step began in; WrongPhase if it is no
        longer there (a cancel, a restart, another step got there first),
        RebuildClaimLost if another worker claims it now."""
        with psycopg.connect(self.product_dsn) as conn:
            moved = sql.move(
                conn,
                row.rebuild_id,
                phase,
                expect=row.phase,
                in_attempt=row.attempt,
                claimed_by=self.worker,
                **changes,
            )
        if moved is None:
            raise WrongPhase(
                f"rebuild {row.rebuild_id} left phase {row.phase} of attempt {row.attempt}"
                f" meanwhile (not moved to {phase})"
            )
        self.on_change(moved)
        return moved

    def _epochs(self) -> EpochSource:
        assert self.epochs is not None, "catch-up and cutover need the control database"
        return self.epochs

    def shadow(self, row: RebuildRow) -> Applier:
        """The shadow's applier (one per shadow consumer, kept between steps), bound to
        the generation the rebuild row names now."""
        with psycopg.connect(self.product_dsn) as conn:
            generation = sql.shadow_generation(conn, row.shadow_consumer)
        if generation is None:
            raise WrongPhase(f"rebuild {row.rebuild_id}: its shadow applies nothing now")
        applier = self._shadows.get(row.shadow_consumer)
        if applier is None or applier.shadow_generation != generation:
            if applier is not None:
                applier.close()
            applier = Applier(
                self.product_dsn,
                self._epochs(),
                self.codec,
                row.shadow_consumer,
                shadow_generation=generation,
            )
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
        self._claims.close()

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
        """One step of one rebuild; None if another worker holds it (also when it took
        the rebuild over during this step)."""
        row = self._claim(rebuild_id)
        if row is None:
            return None
        try:
            after = self._guarded(row)
        except RebuildClaimLost as exc:
            log.info("rebuild %s: %s; that worker carries on", rebuild_id, exc)
            self._drop_shadow(row)
            self._claims.release(lock_name(rebuild_id))
            return None
        except WrongPhase as exc:
            log.info("rebuild %s: %s", rebuild_id, exc)
            after = self._current(row)
        if after.phase in FINAL_PHASES:
            self._claims.release(lock_name(rebuild_id))
        return after

    def _claim(self, rebuild_id: uuid.UUID) -> RebuildRow | None:
        """The rebuild's lock if it is free, then its claim: the row as claimed, or
        None if another worker holds it or it is finished. Gives up the locks of the
        other rebuilds this worker holds that finished meanwhile (cancelled, say)."""
        name = lock_name(rebuild_id)
        locked = self._claims.take(name)
        with psycopg.connect(self.product_dsn) as conn:
            claimed = sql.claim(conn, rebuild_id, self.worker, self.claim_seconds, locked=locked)
            row = sql.get(conn, rebuild_id)
            others = {n for n in self._claims.held() if n != name}
            if others:
                unfinished = {lock_name(r.rebuild_id) for r in sql.unfinished(conn)}
                for finished in others - unfinished:
                    self._claims.release(finished)
        if row is None:
            self._claims.release(name)
            raise RebuildNotFound(f"no rebuild {rebuild_id}")
        if not claimed:
            self._claims.release(name)  # finished, or another worker's
            return None
        return row

    def _guarded(self, row: RebuildRow) -> RebuildRow:
        """``_step``, and what its errors call for: a lease, export or shadow progress
        gone starts the rebuild over, a resolver or schema registry away waits, any
        other error fails the rebuild; each only from the phase the step began in."""
        try:
            return self._step(row)
        except (WrongPhase, RebuildClaimLost):
            raise
        except RetainedEventsGone as exc:
            return self._restart(row, "LEASE_GONE", str(exc))
        except ResolverForgot as exc:  # restored from before its lease or export: start over
            return self._restart(row, exc.resolver_code, str(exc))
        except ShadowProgressLost as exc:
            return self._restart(row, exc.code, str(exc))
        except ResolverUnavailable as exc:
            log.warning("rebuild %s waits for the resolver: %s", row.rebuild_id, exc)
            return row
        except RegistryUnavailable as exc:  # a catch-up's writer schema out of reach
            log.warning("rebuild %s waits for the schema registry: %s", row.rebuild_id, exc)
            return row
        except GaplessError as exc:
            self._drop_shadow(row)
            return self._move(row, "failed", error_code=exc.code, error_message=str(exc)[:2000])

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
            if row.attempt > 1:
                with psycopg.connect(self.product_dsn, autocommit=True) as conn:
                    clear_shadow(
                        conn, row.shadow_consumer, f"attempt {row.attempt - 1} started over"
                    )
            lease = self.client.create_lease(row.stream, f"rebuild:{rid}", self.lease_ttl_seconds)
            return self._move(row, "leased", lease_id=uuid.UUID(lease["lease_id"]))
        assert row.lease_id is not None, "a leased rebuild has its lease"
        if row.phase == "cutting_over" and row.previous_generation is not None:
            return self._finish(row, None)  # swapped before a crash: finish only
        self.client.renew_lease(str(row.lease_id), self.lease_ttl_seconds)
        if row.phase == "leased":
            export = self.client.start_export(str(row.lease_id))
            return self._move(row, "exporting", export_id=uuid.UUID(export["export_id"]))
        assert row.export_id is not None, "an exporting rebuild has its export"
        export = self.client.export(str(row.export_id))
        if row.phase == "exporting":
            if export["status"] == "ready":
                with psycopg.connect(self.product_dsn) as conn:
                    generation = sql.next_generation(
                        conn, row.stream.tenant_id, row.stream.catalog_id
                    )
                return self._move(
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
            load(
                self.product_dsn,
                rid,
                manifest,
                self.fetch,
                lambda _chunks, _rows: self._between_chunks(row),
                attempt=row.attempt,
                worker=self.worker,
                connections=self.load_connections,
            )
            done = self._current(row)
            self.on_change(done)
            return done
        if row.phase == "catching_up":
            return self._catch_up(row)
        if row.phase == "cutting_over":
            return self._cut_over(row)
        raise WrongPhase(f"rebuild {rid} is {row.phase}: nothing to do")

    def _keep_alive(self, row: RebuildRow) -> None:
        """Between pages and chunks: the step goes on only while its claim holds.
        RebuildClaimLost once the session that held the rebuild's lock ended and
        another worker holds it now, or another worker claims the row; WrongPhase once
        the rebuild is finished (a cancel). Then the claim and the lease are renewed."""
        name = lock_name(row.rebuild_id)
        had = name in self._claims.held()
        if not self._claims.take(name) and had:
            raise RebuildClaimLost(
                f"rebuild {row.rebuild_id}: the session holding its lock ended, and the lock"
                " is another worker's now (or the database did not answer)"
            )
        with psycopg.connect(self.product_dsn) as conn:
            if not sql.renew(conn, row.rebuild_id, self.worker, self.claim_seconds):
                raise WrongPhase(f"rebuild {row.rebuild_id} finished meanwhile")
        self.client.renew_lease(str(row.lease_id), self.lease_ttl_seconds)

    def _between_chunks(self, row: RebuildRow) -> None:
        self._keep_alive(row)
        self.yield_to_live()

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
            throttle=Throttle(self.catchup_max_events_per_second),
            before_page=self.yield_to_live,
        )
        if result.caught_up:
            return self._move(
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
        return self._move(row, "catching_up", **changes)

    def _cut_over(self, row: RebuildRow) -> RebuildRow:
        """Catch up to the stream's committed position unpaused, then the swap (which
        catches up only what was committed since, while paused, with one short call
        to the resolver per page: one that fails rolls the swap back, to be tried
        again at the next step)."""
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
            before_page=self.yield_to_live,
        )
        if not before.caught_up:
            return self._move(
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
            worker=self.worker,
            attempt=row.attempt,
        )
        if done is None:
            log.info("rebuild %s: not cut over yet; catching up again", row.rebuild_id)
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
        releases it again (idempotent; a lease the resolver no longer knows counts as
        released)."""
        assert row.lease_id is not None
        self.client.release_lease(str(row.lease_id))
        self._drop_shadow(row)
        changes: dict[str, object] = {"error_code": None, "error_message": None}
        if pause_ms is not None:
            changes["cutover_pause_ms"] = pause_ms
        return self._move(row, "done", **changes)

    def _restart(self, row: RebuildRow, code: str, message: str) -> RebuildRow:
        """Start over with a new lease and export (the ``requested`` step clears the
        shadow first), or fail once attempts run out; either only from the phase the
        step began in, and never once the swap is recorded. The generation a previous
        attempt loaded stays recorded, so the next attempt loads a new one (never on
        top of half an older export)."""
        self._drop_shadow(row)
        if row.attempt >= self.max_attempts:
            return self._move(
                row,
                "failed",
                error_code=code,
                error_message=f"attempt {row.attempt} of {self.max_attempts}: {message}"[:2000],
            )
        log.warning(
            "rebuild %s starts over (attempt %d): %s", row.rebuild_id, row.attempt + 1, message
        )
        return self._move(
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
            loaded_chunks=[],
            rows_loaded=0,
            # The last attempt's export sizes and costs go too: the next load records
            # its own before its first chunk, and until then nothing stale is shown.
            rows_total=None,
            rows_by_kind=Jsonb({}),
            load_cost=Jsonb({}),
            error_code=code,
            error_message=message[:2000],
        )
