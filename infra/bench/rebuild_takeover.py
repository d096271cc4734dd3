"""Takeover: kill -9 the agents worker carrying a rebuild, in a given phase, and time
how long the rebuild waits for another worker (the bench runs one rebuild per
phase: a worker started again takes longer to be ready than a phase may last).

A worker names itself in the rebuild row's ``claimed_by`` as ``<host>-<pid>``
(``processors.agents.rebuilds``), so the claimant is the deployed worker whose
process has that pid. For each phase asked for, in the rebuild's order:

1. wait until the rebuild is in the phase under a worker's claim (inside the load,
   once a chunk is in when there are several) and every other worker answers ready
   (one started again after an earlier kill may still be starting: a takeover then
   would time its start-up); if it went past the phase before that, the phase is
   recorded as missed (``seconds`` None);
2. SIGKILL that worker, then poll the row every ``POLL_S`` until another worker
   claims it, or its phase or attempt moves: ``seconds`` from the kill to that
   (the worker's session ends with it, and with it the rebuild's lock, so the next
   worker's tick takes the claim whatever time the dead one's had left; the
   consumer group notices the death only after its session timeout);
3. start the killed worker again, without waiting for it (the rebuild goes on
   meanwhile, and the next phase may come soon), so the run goes on, and ends, with
   as many workers as it began with (the bench waits for them to be ready before
   its next rebuild, and at the end).

A kill leaves what a crash leaves, which is what is measured; if the bench itself
stops between 2 and 3, the sandbox's processes are stopped all the same.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psycopg

from db.product import rebuilds
from db.product.rebuilds import RebuildRow
from infra.processes import Deployed

PHASES = ("requested", "leased", "exporting", "loading", "catching_up", "cutting_over", "done")
KILLABLE = ("leased", "exporting", "loading", "catching_up", "cutting_over")
DEFAULT_KILLS = ("exporting", "loading", "catching_up")
"""The phases that last longer than a step on any catalog (the others pass in one)."""
TAKEOVER_TARGET_S = 10.0
POLL_S = 0.02


@dataclass(frozen=True, slots=True)
class Takeover:
    phase: str
    killed: str
    """The worker (its claim) that was killed; '' if none was."""
    seconds: float | None
    """From the kill to another worker carrying on; None: the phase was missed."""
    taken_by: str | None = None


def worker_of(claim: str | None, workers: Sequence[Deployed]) -> Deployed | None:
    """The deployed worker a ``claimed_by`` names (``<host>-<pid>``), if any."""
    if not claim or "-" not in claim:
        return None
    pid = claim.rsplit("-", 1)[1]
    return next((w for w in workers if w.alive() and str(w.pid) == pid), None)


def worst(takeovers: Sequence[Takeover]) -> float | None:
    """The longest takeover measured; None if none was."""
    measured = [t.seconds for t in takeovers if t.seconds is not None]
    return max(measured) if measured else None


def _order(phase: str) -> int:
    return PHASES.index(phase) if phase in PHASES else len(PHASES)


def _in(row: RebuildRow, phase: str) -> bool:
    if row.phase != phase or row.claimed_by is None:
        return False
    if phase == "loading" and row.chunks_total > 1:
        return row.chunks_loaded >= 1
    return True


class Killer:
    """Steps 1-3 for one rebuild, driven by the bench's poll of its row."""

    def __init__(
        self,
        product_dsn: str,
        rebuild_id: uuid.UUID,
        phases: Sequence[str],
        workers: Sequence[Deployed],
        echo: Callable[[str], None],
    ) -> None:
        self._dsn = product_dsn
        self._id = rebuild_id
        self._pending = sorted(set(phases), key=_order)
        self._workers = workers
        self._echo = echo
        self.takeovers: list[Takeover] = []

    @property
    def done(self) -> bool:
        return not self._pending

    def observe(self, row: RebuildRow) -> None:
        """Given the row as just read: kill in the next phase if it is there, record
        the phases it went past."""
        while self._pending:
            phase = self._pending[0]
            if _in(row, phase):
                worker = worker_of(row.claimed_by, self._workers)
                if worker is None:
                    return  # claimed by a worker not seen yet: the next poll
                if any(w.health() != 200 for w in self._workers if w is not worker):
                    return  # another worker is still starting: the next poll
                self._pending.pop(0)
                self.takeovers.append(self._kill(phase, row, worker))
                return
            if _order(row.phase) > _order(phase) or row.phase in ("failed", "cancelled"):
                self._pending.pop(0)
                self.takeovers.append(Takeover(phase, "", None))
                self._echo(f"rebuild: takeover in {phase} missed (the rebuild is {row.phase})")
                continue
            return

    def _row(self) -> RebuildRow:
        with psycopg.connect(self._dsn, autocommit=True) as conn:
            row = rebuilds.get(conn, self._id)
        assert row is not None
        return row

    def _kill(self, phase: str, row: RebuildRow, worker: Deployed) -> Takeover:
        claim = row.claimed_by or ""
        worker.kill()
        killed_at = time.monotonic()
        # Where the dead worker left it (it may have moved it on since ``row`` was read).
        row = self._row()
        self._echo(f"rebuild: killed {worker.name} ({claim}) in {row.phase}")
        deadline = killed_at + 10 * TAKEOVER_TARGET_S + 120
        while True:
            now = self._row()
            moved = (now.phase, now.attempt) != (row.phase, row.attempt)
            if (now.claimed_by not in (None, claim)) or moved:
                seconds = time.monotonic() - killed_at
                break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"rebuild {self._id}: no worker carried on {time.monotonic() - killed_at:.0f}s"
                    f" after {worker.name} was killed in {row.phase}"
                )
            time.sleep(POLL_S)
        self._echo(
            f"rebuild: {now.claimed_by} carried on after {seconds:.2f} s"
            f" (now {now.phase}); starting {worker.name} again"
        )
        worker.start()
        return Takeover(phase, claim, seconds, now.claimed_by)
