"""Fence runs (``gapless fence-epoch --all``): the plan of a fence of every catalog of a
restored database, kept in the control database.

The plan names each catalog with the epoch that was current when the run began, the
one it fences. Running the same run again (by its id) fences those epochs and never
the ones the run itself issued, so every step of the procedure stays idempotent
across catalogs too.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

import psycopg


@dataclass(frozen=True, slots=True)
class FenceRun:
    run_id: uuid.UUID
    requested_by: str
    reason: str
    created_at: datetime
    catalogs: list[tuple[str, str, int]] = field(default_factory=list)
    """(tenant, catalog, the epoch to fence), in order."""


def plan_run(conn: psycopg.Connection, actor: str, reason: str) -> FenceRun:
    """Record a new run fencing every catalog at its current epoch (one transaction:
    the caller commits)."""
    run_id = uuid.uuid4()
    row = conn.execute(
        "INSERT INTO fence_run (run_id, requested_by, reason) VALUES (%s, %s, %s)"
        " RETURNING created_at",
        (run_id, actor, reason),
    ).fetchone()
    assert row is not None
    conn.execute(
        "INSERT INTO fence_run_catalog (run_id, tenant_id, catalog_id, superseded_epoch)"
        " SELECT %s, tenant_id, catalog_id, epoch FROM history_epoch",
        (run_id,),
    )
    run = load_run(conn, run_id)
    assert run is not None
    return run


def load_run(conn: psycopg.Connection, run_id: uuid.UUID) -> FenceRun | None:
    row = conn.execute(
        "SELECT requested_by, reason, created_at FROM fence_run WHERE run_id = %s", (run_id,)
    ).fetchone()
    if row is None:
        return None
    catalogs = conn.execute(
        "SELECT tenant_id, catalog_id, superseded_epoch FROM fence_run_catalog"
        " WHERE run_id = %s ORDER BY tenant_id, catalog_id",
        (run_id,),
    ).fetchall()
    return FenceRun(
        run_id, str(row[0]), str(row[1]), row[2], [(str(t), str(c), int(e)) for t, c, e in catalogs]
    )


def recent_runs(conn: psycopg.Connection, days: int = 30) -> list[FenceRun]:
    """The runs of the last ``days``, newest first."""
    ids = conn.execute(
        "SELECT run_id FROM fence_run WHERE created_at > now() - make_interval(days => %s)"
        " ORDER BY created_at DESC",
        (days,),
    ).fetchall()
    return [run for (run_id,) in ids if (run := load_run(conn, run_id)) is not None]
