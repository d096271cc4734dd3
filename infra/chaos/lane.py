"""The rebuild lane: kills in every phase of the campaign's rebuilds and between the
cutover's steps, each where the code is, not where a timer happens to land.

A rebuild passes each of its phase boundaries and cutover steps once, at an instant
no plan can know, in whichever agents worker carries it then (the others wait on
its lock). So the lane does not schedule these kills; it arms every agents
incarnation with all of them (``crashpoints.REBUILD_POINTS``), each to kill once in
the whole campaign (``crashpoints.Ledger``):

1. ``environment``: the variables that arm an agents process so, on every start
   (first, after a kill, after a death at a point);
2. while the faults run, the worker carrying a rebuild dies at the first point it
   passes that nobody died at yet; the next worker takes the rebuild over at once
   (the dead one's session, and the rebuild's lock with it, ended) and dies at the
   next point, and so on along the rebuild (and the fence's rebuild, whichever gets
   there first), while the dead ones start again;
3. ``close``: once the campaign's rebuilds and its fence are finished (or it gave up
   waiting), every point nobody reached is closed in the ledger, so no worker dies
   at it any more (the calm and the convergence run without the lane);
4. ``summarize``: from the ledger and the rebuild rows, per point the process that
   died there and the rebuild it carried, per rebuild the workers killed in it, and
   the points never reached: each one a violation (``check.judge``), as is a
   campaign in which no rebuild lost two distinct workers, so the lane can never
   pass having covered nothing.

A worker killed by the plan's SIGKILL just after it recorded itself in the ledger
still counts for the point: it was there, and died there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from infra.chaos.crashpoints import (
    LEDGER_VARIABLE,
    ONCE_VARIABLE,
    REBUILD_POINTS,
    Ledger,
    Reached,
)

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def ledger(directory: Path) -> Ledger:
    """A fresh ledger in ``directory`` (made here; it stays with the run's logs)."""
    directory.mkdir(parents=True, exist_ok=False)
    return Ledger(directory)


def environment(book: Ledger) -> dict[str, str]:
    """Step 1: what arms an agents process with every rebuild point, once each."""
    return {ONCE_VARIABLE: ",".join(REBUILD_POINTS), LEDGER_VARIABLE: str(book.directory)}


def close(book: Ledger) -> list[str]:
    """Step 3: the points nobody reached, closed."""
    return book.close(REBUILD_POINTS)


@dataclass(frozen=True, slots=True)
class Rebuild:
    """What the summary needs of one rebuild row."""

    stream: str
    phase: str
    attempt: int
    chunks_total: int


def rebuilds(product_dsn: str) -> dict[str, Rebuild]:
    """Every rebuild of the campaign's product database, by id."""
    with psycopg.connect(product_dsn, autocommit=True, connect_timeout=3) as conn:
        rows = conn.execute(
            "SELECT rebuild_id, tenant_id, catalog_id, history_epoch, phase, attempt,"
            " chunks_total FROM rebuild"
        ).fetchall()
    return {
        str(r[0]): Rebuild(f"{r[1]}/{r[2]}/{r[3]}", str(r[4]), int(r[5]), int(r[6])) for r in rows
    }


@dataclass
class Figures:
    by_point: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Point → the process that died there, the rebuild it carried, when (seconds
    after the faults began)."""
    by_rebuild: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Rebuild id → its stream, phase, attempt, chunks, and the processes killed and
    points reached in it."""
    unreached: list[str] = field(default_factory=list)
    most_workers: int = 0
    """The most distinct processes killed at the lane's points in one rebuild."""


def summarize(
    entries: Mapping[str, Reached],
    pids: Mapping[int, str],
    known: Mapping[str, Rebuild],
    began: float,
) -> Figures:
    """Step 4 (pure): ``entries`` from the ledger, ``pids`` the fleet's incarnations,
    ``known`` the rebuild rows, ``began`` the faults' start (epoch seconds)."""
    figures = Figures()
    for point in REBUILD_POINTS:
        reached = entries.get(point)
        if reached is None or reached.closed:
            figures.unreached.append(point)
            continue
        found = _UUID.search(reached.subject)
        rebuild_id = found.group(0) if found else None
        process = pids.get(reached.pid, f"pid {reached.pid}")
        figures.by_point[point] = {
            "process": process,
            "rebuild": rebuild_id,
            "at_s": round(reached.at - began, 1),
        }
        if rebuild_id is None:
            continue
        row = known.get(rebuild_id)
        entry = figures.by_rebuild.setdefault(
            rebuild_id,
            {
                "stream": row.stream if row else None,
                "phase": row.phase if row else None,
                "attempt": row.attempt if row else None,
                "chunks_total": row.chunks_total if row else None,
                "processes": [],
                "points": [],
            },
        )
        entry["points"].append(point)
        if process not in entry["processes"]:
            entry["processes"].append(process)
    figures.most_workers = max(
        (len(e["processes"]) for e in figures.by_rebuild.values()), default=0
    )
    return figures
