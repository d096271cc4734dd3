"""A ``gapless`` process that dies on its own in one narrow window, for the campaign.

A SIGKILL from outside lands wherever the process happens to be; the windows that
matter most are a few microseconds wide. ``python -m infra.chaos.crashpoints ARGS``
runs ``gapless ARGS`` (``infra.cli``) unchanged, except that the functions at the
points it is armed with are wrapped (the code of the layers below knows nothing of
it) so that the process ends with ``os._exit(CRASH_EXIT)`` there: no ``finally``, no
flush, no goodbye to the broker, as a SIGKILL would (in the style of the fault
fixtures of the tests). Two ways to arm it, which can go together:

- ``GAPLESS_CHAOS_CRASH_POINT`` names one point: the ``GAPLESS_CHAOS_CRASH_PASSES``-th
  call (default 1) that counts there ends this incarnation;
- ``GAPLESS_CHAOS_CRASH_ONCE`` names several (comma-separated) and
  ``GAPLESS_CHAOS_CRASH_LEDGER`` a directory shared by every process armed so
  (``Ledger``): the first of them to reach a point there records itself in the
  ledger (its pid, what the call worked on, when) and dies; every later pass, in
  any process, goes on. So each point kills exactly once in a campaign, whichever
  worker carries the work when it gets there, and the campaign reads from the
  ledger which points were reached, by whom and in which rebuild.

A call counts only if the point's ``when`` holds for it (a claim that was taken, a
move to one phase); ``subject`` says what it worked on (for a rebuild: its id).

Points (the wrapped function; where the process dies):
- ``relay.produced``: ``producers.relay.relay.mark_published_all``, before it runs:
  Kafka confirmed the batch, its published position is not recorded;
- ``applier.committed``: ``processors.applier.batch.Applier.apply``, after it
  returned: the batch's transaction committed, nothing acknowledged to Kafka;
- ``worker.checkpoint``: ``producers.capture.worker.checkpoints.advance``, after
  the compare-and-set moved the checkpoint, before its transaction commits;
- ``intake.evidence_put``: ``producers.capture.evidence.EvidenceStore.put``, after
  the artifact is in the object store, before the intake transaction.

The rebuild's (``processors.rebuild.orchestrator``, ``Orchestrator`` below), in the
order a rebuild passes them (``REBUILD_POINTS``); each leaves the rebuild to the next
worker, which takes it over at once (the dead worker's session, and the rebuild's
lock with it, ended):
- ``rebuild.claimed``: ``Orchestrator._claim`` returned a row: the lock and the claim
  taken and committed, the step not begun;
- ``rebuild.leased``: ``ResolverClient.create_lease`` returned: the resolver holds a
  lease the rebuild row does not name (the next worker takes another; this one
  expires);
- ``rebuild.exporting``: ``Orchestrator._move`` to ``exporting`` returned: the export
  asked for and recorded;
- ``rebuild.export_ready``: ``_move`` to ``loading`` returned: the ready export, W and
  the new generation recorded, nothing loaded;
- ``rebuild.load``: ``processors.rebuild.load._write_chunk``, after it returned: a
  chunk written in the load's transaction, not committed;
- ``rebuild.chunk``: ``Orchestrator._keep_alive`` in ``loading``, before it runs: a
  chunk and its count committed, the next chunk not begun (mid-load);
- ``rebuild.loaded``: ``load`` returned: the last chunk loaded, the shadow's row at W
  and ``catching_up`` committed, no page caught up;
- ``rebuild.catchup_page``: ``_keep_alive`` in ``catching_up``, before it runs: a
  catch-up page applied by the shadow and committed, the next not fetched;
- ``rebuild.caught_up``: ``_move`` to ``cutting_over`` returned: the shadow at H;
- ``rebuild.cutover.locked``: ``processors.rebuild.cutover._shadow_progress``, before
  it runs: the cutover's transaction holds the live consumer's rows (the live
  applier of the stream is paused), nothing swapped;
- ``rebuild.cutover.swapped``: ``db.product.rebuilds.update`` recording the retired
  generation, after it returned: the serving generation swapped, counts carried,
  the rebuild row updated, in the transaction, before its COMMIT (all rolled back);
- ``rebuild.cutover``: ``Orchestrator``'s ``cut_over``, after it returned a cutover:
  committed, the pause over (the row locks are the pause: the COMMIT releases them),
  the lease not released, the rebuild not marked done;
- ``rebuild.released``: ``Orchestrator._drop_shadow`` after the swap, before it
  runs: the lease released, the rebuild not marked done.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import runpy
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

POINT_VARIABLE = "GAPLESS_CHAOS_CRASH_POINT"
PASSES_VARIABLE = "GAPLESS_CHAOS_CRASH_PASSES"
ONCE_VARIABLE = "GAPLESS_CHAOS_CRASH_ONCE"
LEDGER_VARIABLE = "GAPLESS_CHAOS_CRASH_LEDGER"
CRASH_EXIT = 97
"""The exit status of a crash at a point: the campaign tells it from any other exit."""


@dataclass(frozen=True, slots=True)
class Call:
    """One call through a wrapped function (``result``: None before it ran)."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    result: Any = None


@dataclass(frozen=True, slots=True)
class Point:
    module: str
    owner: str | None
    """The class holding the function, or None for a module-level function."""
    name: str
    before: bool
    """Die before the call (True) or once it returned (False)."""
    when: Callable[[Call], bool] | None = None
    """Which calls count (None: every call)."""
    subject: Callable[[Call], object] | None = None
    """What the call worked on, for the ledger (None: nothing recorded)."""


def _arg(call: Call, index: int, name: str) -> Any:
    return call.args[index] if len(call.args) > index else call.kwargs.get(name)


def _moved_to(phase: str) -> Callable[[Call], bool]:
    """A call of ``Orchestrator._move(row, phase, …)`` to ``phase``."""
    return lambda call: _arg(call, 2, "phase") == phase


def _in_phase(phase: str) -> Callable[[Call], bool]:
    """A call of ``Orchestrator._keep_alive(row)`` in a step of ``phase``."""
    return lambda call: getattr(_arg(call, 1, "row"), "phase", None) == phase


def _row_id(call: Call) -> object:
    """The rebuild id of a method's ``row`` argument."""
    return getattr(_arg(call, 1, "row"), "rebuild_id", None)


_ORCHESTRATOR = "processors.rebuild.orchestrator"
_CLIENT = "processors.resolver_client"

POINTS = {
    "relay.produced": Point("producers.relay.relay", None, "mark_published_all", before=True),
    "applier.committed": Point("processors.applier.batch", "Applier", "apply", before=False),
    "worker.checkpoint": Point(
        "producers.capture.worker.checkpoints", None, "advance", before=False
    ),
    "intake.evidence_put": Point(
        "producers.capture.evidence", "EvidenceStore", "put", before=False
    ),
    "rebuild.claimed": Point(
        _ORCHESTRATOR,
        "Orchestrator",
        "_claim",
        before=False,
        when=lambda call: call.result is not None,
        subject=lambda call: _arg(call, 1, "rebuild_id"),
    ),
    "rebuild.leased": Point(
        _CLIENT,
        "ResolverClient",
        "create_lease",
        before=False,
        subject=lambda call: _arg(call, 2, "holder"),
    ),
    "rebuild.exporting": Point(
        _ORCHESTRATOR,
        "Orchestrator",
        "_move",
        before=False,
        when=_moved_to("exporting"),
        subject=_row_id,
    ),
    "rebuild.export_ready": Point(
        _ORCHESTRATOR,
        "Orchestrator",
        "_move",
        before=False,
        when=_moved_to("loading"),
        subject=_row_id,
    ),
    "rebuild.load": Point("processors.rebuild.load", None, "_write_chunk", before=False),
    "rebuild.chunk": Point(
        _ORCHESTRATOR,
        "Orchestrator",
        "_keep_alive",
        before=True,
        when=_in_phase("loading"),
        subject=_row_id,
    ),
    "rebuild.loaded": Point(
        _ORCHESTRATOR,
        None,
        "load",
        before=False,
        subject=lambda call: _arg(call, 1, "rebuild_id"),
    ),
    "rebuild.catchup_page": Point(
        _ORCHESTRATOR,
        "Orchestrator",
        "_keep_alive",
        before=True,
        when=_in_phase("catching_up"),
        subject=_row_id,
    ),
    "rebuild.caught_up": Point(
        _ORCHESTRATOR,
        "Orchestrator",
        "_move",
        before=False,
        when=_moved_to("cutting_over"),
        subject=_row_id,
    ),
    "rebuild.cutover.locked": Point(
        "processors.rebuild.cutover",
        None,
        "_shadow_progress",
        before=True,
        subject=lambda call: getattr(_arg(call, 2, "row"), "rebuild_id", None),
    ),
    "rebuild.cutover.swapped": Point(
        "db.product.rebuilds",
        None,
        "update",
        before=False,
        when=lambda call: call.kwargs.get("previous_generation") is not None,
        subject=lambda call: _arg(call, 1, "rebuild_id"),
    ),
    "rebuild.cutover": Point(
        _ORCHESTRATOR,
        None,
        "cut_over",
        before=False,
        when=lambda call: call.result is not None,
        subject=lambda call: _arg(call, 3, "rebuild_id"),
    ),
    "rebuild.released": Point(
        _ORCHESTRATOR,
        "Orchestrator",
        "_drop_shadow",
        before=True,
        when=lambda call: getattr(_arg(call, 1, "row"), "previous_generation", None) is not None,
        subject=_row_id,
    ),
}

REBUILD_POINTS = (
    "rebuild.claimed",
    "rebuild.leased",
    "rebuild.exporting",
    "rebuild.export_ready",
    "rebuild.chunk",
    "rebuild.loaded",
    "rebuild.catchup_page",
    "rebuild.caught_up",
    "rebuild.cutover.locked",
    "rebuild.cutover.swapped",
    "rebuild.cutover",
    "rebuild.released",
)
"""A rebuild's phase boundaries and the cutover's steps, in the order a rebuild passes
them: the points the campaign arms every agents worker with, once each
(``ONCE_VARIABLE``). ``rebuild.load`` (inside a chunk's transaction) is left to the
random plan."""
CUTOVER_POINTS = REBUILD_POINTS[-4:]


@dataclass(frozen=True, slots=True)
class Reached:
    """One ledger entry: the point, the process that died there (its pid; 0 when the
    campaign closed the point unreached), what it worked on and when (epoch seconds)."""

    point: str
    pid: int
    subject: str
    at: float

    @property
    def closed(self) -> bool:
        return self.pid == 0


@dataclass(frozen=True)
class Ledger:
    """The points of ``ONCE_VARIABLE`` reached so far: one file per point in
    ``directory``, created exclusively by the first process to get there (so two
    processes at the same point at once: one dies, the other goes on) and written
    before it dies. A crash between the file's creation and its contents leaves an
    empty file: the point counts as reached, by an unknown process."""

    directory: Path
    _now: Callable[[], float] = field(default=time.time, repr=False)

    def take(self, point: str, subject: object) -> bool:
        """Whether this process is the first at ``point`` (then it is recorded)."""
        return self._write(point, os.getpid(), subject)

    def close(self, points: Iterable[str]) -> list[str]:
        """Mark the points of ``points`` nobody reached yet as closed (pid 0), so no
        process dies at them any more; the ones it closed."""
        return [p for p in points if self._write(p, 0, "closed")]

    def _write(self, point: str, pid: int, subject: object) -> bool:
        try:
            fd = os.open(self.directory / point, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        entry = {"pid": pid, "subject": "" if subject is None else str(subject), "at": self._now()}
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(entry))
            handle.flush()
            os.fsync(handle.fileno())
        return True

    def entries(self) -> dict[str, Reached]:
        """Every point reached or closed, by name."""
        found = {}
        for path in sorted(self.directory.iterdir()) if self.directory.exists() else []:
            try:
                data = json.loads(path.read_text() or "{}")
            except (OSError, ValueError):
                data = {}
            found[path.name] = Reached(
                path.name,
                int(data.get("pid", -1)),
                str(data.get("subject", "")),
                float(data.get("at", 0.0)),
            )
        return found

    def point_of(self, pid: int) -> str | None:
        """The point the process ``pid`` died at, if it died at one of these."""
        for name, reached in self.entries().items():
            if reached.pid == pid:
                return name
        return None


def _die() -> None:
    os._exit(CRASH_EXIT)


def _wrap(name: str, should_die: Callable[[Call], bool], die: Callable[[], None]) -> None:
    """Wrap the function at point ``name``: each call that counts (``Point.when``) asks
    ``should_die`` before the call or once it returned, as the point says."""
    point = POINTS[name]
    module = importlib.import_module(point.module)
    holder: Any = getattr(module, point.owner) if point.owner else module
    original = getattr(holder, point.name)

    @functools.wraps(original)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if point.before:
            call = Call(args, kwargs)
            if (point.when is None or point.when(call)) and should_die(call):
                die()
        result = original(*args, **kwargs)
        if not point.before:
            call = Call(args, kwargs, result)
            if (point.when is None or point.when(call)) and should_die(call):
                die()
        return result

    setattr(holder, point.name, wrapped)


def arm(name: str, passes: int, die: Callable[[], None] = _die) -> None:
    """Wrap the function at point ``name`` so that its ``passes``-th counted call
    ``die``s."""
    calls = 0

    def should_die(_call: Call) -> bool:
        nonlocal calls
        calls += 1
        return calls == passes

    _wrap(name, should_die, die)


def arm_once(names: Iterable[str], ledger: Ledger, die: Callable[[], None] = _die) -> None:
    """Wrap the functions at points ``names`` so that the first counted call at each,
    in any process armed with the same ``ledger``, records itself there and ``die``s."""
    for name in names:
        point = POINTS[name]

        def should_die(call: Call, name: str = name, point: Point = point) -> bool:
            subject = point.subject(call) if point.subject is not None else None
            return ledger.take(name, subject)

        _wrap(name, should_die, die)


def arm_from_environment() -> list[str]:
    """Arm this process as ``POINT_VARIABLE`` and ``ONCE_VARIABLE`` say; what it armed,
    as lines for its log."""
    armed = []
    name = os.environ.get(POINT_VARIABLE)
    if name:
        if name not in POINTS:
            raise SystemExit(f"{POINT_VARIABLE}={name!r}: not one of {', '.join(sorted(POINTS))}")
        passes = int(os.environ.get(PASSES_VARIABLE, "1"))
        arm(name, passes)
        armed.append(f"crash point {name} armed: dies on pass {passes}")
    once = [n for n in os.environ.get(ONCE_VARIABLE, "").split(",") if n]
    if once:
        unknown = sorted(set(once) - set(POINTS))
        if unknown:
            raise SystemExit(f"{ONCE_VARIABLE}: {unknown} not among {', '.join(sorted(POINTS))}")
        directory = os.environ.get(LEDGER_VARIABLE)
        if not directory:
            raise SystemExit(f"{ONCE_VARIABLE} needs {LEDGER_VARIABLE}, the shared ledger")
        arm_once(once, Ledger(Path(directory)))
        armed.append(f"crash points {', '.join(once)} armed once, ledger {directory}")
    return armed


def main() -> None:
    for line in arm_from_environment():
        print(line, file=sys.stderr, flush=True)
    # The command runs as ``python -m infra.cli`` would run it, as this process's
    # main program: this module stays below the CLI, which starts the campaign.
    sys.argv[0] = "gapless"
    runpy.run_module("infra.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
