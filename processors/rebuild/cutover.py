"""Cutover: from H on, the live consumer of the stream serves the shadow's generation.

One transaction, on a connection of its own:

1. lock the rebuild row; it must still be ``cutting_over`` with no swap recorded,
   in the step's attempt and under its worker's claim (a cancel, a restart or
   another worker's step wins otherwise);
2. lock the live consumer's progress rows of the stream's catalog, its older
   epochs first, then the stream's own (``db.product.cutover.lock_live``: the applier's
   lock order). The live applier (its batches, the gap closer, an operator's
   retries) locks the stream's row first in every transaction touching the
   stream, so from here it waits: the pause begins;
3. read the live consumer's progress L and R, the highest position it holds any
   inbox row for (it has taken every event it has a row for, and may have applied
   those above L into the old generation);
4. H is the shadow's progress, at least the target chosen while catching up (short
   of it: roll back, catch up first); while H < R, catch the shadow up (its own
   connection, each page a committed shadow batch) within ``pause_budget_seconds``.
   Each page is one call to the resolver, tried once within what is left of the
   budget (``ResolverClient.once``): a resolver that does not answer in time, like
   a shadow still short of R when the budget is spent, rolls back: the pause ends
   with nothing changed, and the caller catches up further and tries again at its
   next step (retried calls, at up to 25 s, would have held the live applier);
5. the stream's epoch must still be current (control database), else the rebuild
   fails ``REBUILD_EPOCH_NOT_CURRENT`` (a restore fenced it; the new epoch needs its own);
6. swap: the live row's generation becomes the shadow's and its position max(L, H);
   its rows of the catalog's older epochs follow; its counts take in the shadow's
   outcomes of the positions in (L, H] it had none of its own for, and those the
   shadow has none for either (at or below W: loaded with the export) as loaded,
   so that they count every position once;
7. settle what the live consumer still held open at or below H (parked events,
   open quarantine entries): the generation it now serves holds their outcome;
8. record on the rebuild row the retired generation and H;
COMMIT: the pause ends, the live applier goes on after H in the new generation. The
pause (steps 2 to COMMIT) is recorded when the rebuild finishes.

Why H >= R: every event the live consumer took is then at or below H, applied by the
shadow into the new generation; every event it has not taken yet is either at or
below H (a duplicate by position when it comes) or above H, and the live applier
applies it into the new generation when Kafka or the gap closer brings it (the
resolver retains it: the live consumer's reported progress is at most L until the
cutover, and the lease pins W). Events the shadow applied above H are in the new
generation already; their copies are ``ignored_stale`` by revision.

A crash before COMMIT changes nothing but the shadow's committed catch-up batches.
After COMMIT the rebuild row says the swap happened (``previous_generation``): the
next step only releases the lease and finishes the rebuild.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from db.exceptions import RebuildClaimLost
from db.product import cutover as sql
from db.product import rebuilds
from db.product.rebuilds import RebuildRow
from processors.applier.batch import Applier
from processors.applier.exceptions import ShadowProgressLost
from processors.exceptions import ResolverUnavailable
from processors.rebuild.catchup import fetch_and_apply
from processors.rebuild.exceptions import EpochNotCurrentForRebuild, WrongPhase
from processors.resolver_client import ResolverClient

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CutOver:
    """What the cutover did: the new serving position H, the live progress it
    replaced, the pause, and what it settled."""

    target: int
    live_before: int
    received_through: int
    pause_ms: float
    parked_settled: int
    quarantine_settled: int
    row: RebuildRow


def cut_over(
    product_dsn: str,
    client: ResolverClient,
    shadow: Applier,
    rebuild_id: uuid.UUID,
    current_epoch: Callable[[], int | None],
    *,
    page_size: int = 2000,
    pause_budget_seconds: float = 2.0,
    worker: str | None = None,
    attempt: int | None = None,
) -> CutOver | None:
    """Steps 1-8; None when the shadow could not reach R within the pause budget, or
    the resolver did not answer in time. ``worker`` and ``attempt``: the step's, which
    step 1 requires still."""
    done: CutOver | None = None
    with psycopg.connect(product_dsn) as conn:
        with conn.transaction():
            row = rebuilds.get(conn, rebuild_id, lock=True)
            _check(row, rebuild_id, worker, attempt)
            assert row is not None and row.generation is not None and row.lease_id is not None
            live = sql.lock_live(conn, row.consumer, row.stream)
            paused = time.monotonic()
            target = _shadow_progress(conn, shadow, row)
            if row.target_position is not None and target < row.target_position:
                raise psycopg.Rollback()  # not through the chosen H: more catching up first
            target = _catch_up_in_pause(
                client,
                shadow,
                row,
                target,
                live.received_through,
                paused,
                pause_budget_seconds,
                page_size,
            )
            epoch = current_epoch()
            if epoch != row.stream.history_epoch:
                raise EpochNotCurrentForRebuild(
                    f"{row.stream} is no longer the current history of its catalog"
                    f" (current epoch: {epoch})"
                )
            sql.carry_counts(conn, row.consumer, shadow.consumer, row.stream, live.position, target)
            sql.swap(conn, row.consumer, row.stream, row.generation, target)
            settled = sql.retire_through(
                conn,
                row.consumer,
                row.stream,
                target,
                f"rebuild {rebuild_id} cut over at position {target}",
            )
            swapped = rebuilds.update(
                conn,
                rebuild_id,
                "cutting_over",
                previous_generation=live.generation,
                target_position=target,
                caught_up_position=target,
            )
            done = CutOver(
                target,
                live.position,
                live.received_through,
                0.0,
                settled.parked,
                settled.quarantined,
                swapped,
            )
        if done is None:
            return None  # rolled back: the pause ended with nothing changed
        pause_ms = (time.monotonic() - paused) * 1000.0  # through the COMMIT
    return dataclasses.replace(done, pause_ms=pause_ms)


def _check(
    row: RebuildRow | None, rebuild_id: uuid.UUID, worker: str | None, attempt: int | None
) -> None:
    """Step 1's checks of the locked rebuild row."""
    if row is None or row.phase != "cutting_over" or row.previous_generation is not None:
        raise WrongPhase(f"rebuild {rebuild_id} is not waiting to cut over")
    if attempt is not None and row.attempt != attempt:
        raise WrongPhase(f"rebuild {rebuild_id} started over meanwhile (attempt {row.attempt})")
    if worker is not None and row.claimed_by != worker:
        raise RebuildClaimLost(f"rebuild {rebuild_id} is claimed by {row.claimed_by}, not {worker}")


def _catch_up_in_pause(
    client: ResolverClient,
    shadow: Applier,
    row: RebuildRow,
    target: int,
    received_through: int,
    paused: float,
    pause_budget_seconds: float,
    page_size: int,
) -> int:
    """Step 4's catch-up: shadow pages from H until H >= R, each within what is left of
    the pause budget; the new H. Rolls the cutover back (``psycopg.Rollback``) when
    the budget is spent, the resolver does not answer in time or there is nothing
    more to fetch short of R."""
    while target < received_through:
        left = pause_budget_seconds - (time.monotonic() - paused)
        if left <= 0:
            raise psycopg.Rollback()
        try:
            n, _last, _committed, after = fetch_and_apply(
                client.once(left), shadow, str(row.lease_id), row.stream, target, page_size
            )
        except ResolverUnavailable as exc:
            log.warning(
                "rebuild %s: no answer from the resolver within the pause (%s);"
                " the cutover is rolled back and tried again later",
                row.rebuild_id,
                exc,
            )
            raise psycopg.Rollback() from exc
        if n == 0:  # short of R with nothing more to fetch: blocked
            raise psycopg.Rollback()
        target = max(target, after)
    return target


def _shadow_progress(conn: psycopg.Connection, shadow: Applier, row: RebuildRow) -> int:
    position = sql.progress_of(conn, shadow.consumer, row.stream)
    if position is None:
        raise ShadowProgressLost(f"shadow {shadow.consumer} has no progress row of {row.stream}")
    return position
