"""A ``gapless`` process that dies on its own in one narrow window, for the campaign.

A SIGKILL from outside lands wherever the process happens to be; the windows that
matter most are a few microseconds wide. ``python -m infra.chaos.crashpoints ARGS``
runs ``gapless ARGS`` (``infra.cli``) unchanged, except that when
``GAPLESS_CHAOS_CRASH_POINT`` names a point below, the function at that point is
wrapped so that the ``GAPLESS_CHAOS_CRASH_PASSES``-th call (default 1) ends the
process with ``os._exit(CRASH_EXIT)``: no ``finally``, no flush, no goodbye to the
broker, as a SIGKILL would (in the style of the fault fixtures of the tests).

Points (the wrapped function; where the process dies):
- ``relay.produced``: ``producers.relay.relay.mark_published_all``, before it runs:
  Kafka confirmed the batch, its published position is not recorded;
- ``applier.committed``: ``processors.applier.batch.Applier.apply``, after it
  returned: the batch's transaction committed, nothing acknowledged to Kafka;
- ``rebuild.load``: ``processors.rebuild.load._write_chunk``, after a chunk of the
  export was written in the load's transaction;
- ``rebuild.cutover``: ``processors.rebuild.orchestrator.cut_over``, after it
  returned: the serving generation swapped, the rebuild not yet marked done;
- ``worker.checkpoint``: ``producers.capture.worker.checkpoints.advance``, after
  the compare-and-set moved the checkpoint, before its transaction commits;
- ``intake.evidence_put``: ``producers.capture.evidence.EvidenceStore.put``, after
  the artifact is in the object store, before the intake transaction.
"""

from __future__ import annotations

import functools
import importlib
import os
import runpy
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

POINT_VARIABLE = "GAPLESS_CHAOS_CRASH_POINT"
PASSES_VARIABLE = "GAPLESS_CHAOS_CRASH_PASSES"
CRASH_EXIT = 97
"""The exit status of a crash at a point: the campaign tells it from any other exit."""


@dataclass(frozen=True, slots=True)
class Point:
    module: str
    owner: str | None
    """The class holding the function, or None for a module-level function."""
    name: str
    before: bool
    """Die before the call (True) or once it returned (False)."""


POINTS = {
    "relay.produced": Point("producers.relay.relay", None, "mark_published_all", before=True),
    "applier.committed": Point("processors.applier.batch", "Applier", "apply", before=False),
    "rebuild.load": Point("processors.rebuild.load", None, "_write_chunk", before=False),
    "rebuild.cutover": Point("processors.rebuild.orchestrator", None, "cut_over", before=False),
    "worker.checkpoint": Point(
        "producers.capture.worker.checkpoints", None, "advance", before=False
    ),
    "intake.evidence_put": Point(
        "producers.capture.evidence", "EvidenceStore", "put", before=False
    ),
}


def _die() -> None:
    os._exit(CRASH_EXIT)


def arm(name: str, passes: int, die: Callable[[], None] = _die) -> None:
    """Wrap the function at point ``name`` so that its ``passes``-th call ``die``s."""
    point = POINTS[name]
    module = importlib.import_module(point.module)
    holder: Any = getattr(module, point.owner) if point.owner else module
    original = getattr(holder, point.name)
    calls = 0

    @functools.wraps(original)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if point.before and calls == passes:
            die()
        result = original(*args, **kwargs)
        if not point.before and calls == passes:
            die()
        return result

    setattr(holder, point.name, wrapped)


def main() -> None:
    name = os.environ.get(POINT_VARIABLE)
    if name:
        if name not in POINTS:
            raise SystemExit(f"{POINT_VARIABLE}={name!r}: not one of {', '.join(sorted(POINTS))}")
        passes = int(os.environ.get(PASSES_VARIABLE, "1"))
        arm(name, passes)
        print(f"crash point {name} armed: dies on pass {passes}", file=sys.stderr, flush=True)
    # The command runs as ``python -m infra.cli`` would run it, as this process's
    # main program: this module stays below the CLI, which starts the campaign.
    sys.argv[0] = "gapless"
    runpy.run_module("infra.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
