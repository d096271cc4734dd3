"""Step 5 of the campaign: after the faults, wait until everything has caught up:
every process up, every stream published and applied to its cursor, every capture
job settled, the rebuild and the fence done."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from infra.chaos import check
from infra.chaos.exits import watch
from infra.chaos.fencing import Fence
from infra.chaos.fleet import Echo, Fleet
from infra.chaos.load import Load
from infra.chaos.report import Report
from infra.chaos.roster import CONSUMER

CONVERGE_TIMEOUT_S = 300.0
ECHO_EVERY_S = 5.0


def converge(
    databases: Any,
    load: Load,
    fleet: Fleet,
    fence: Fence,
    rebuild: Any,
    report: Report,
    seen: check.Seen,
    echo: Echo,
) -> bool:
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    last = 0.0
    while time.monotonic() < deadline:
        watch(fleet, report, seen, echo)
        try:
            behind = _behind(databases, load)
        except psycopg.Error as exc:
            behind = [f"database: {exc}"]
        phase = rebuild_phase(rebuild)
        if phase != "done":
            behind.append(f"rebuild {phase}")
        if not fence.done:
            behind.append("fence")
        if not fleet.all_alive():
            if seen.exited_on_their_own:
                echo("  a process is down on its own: no convergence to wait for")
                return False
            behind.append("a process is down")
        if not behind:
            return True
        if time.monotonic() - last >= ECHO_EVERY_S:
            last = time.monotonic()
            echo(f"  not yet: {'; '.join(behind[:4])}")
        time.sleep(0.5)
    return False


def _behind(databases: Any, load: Load) -> list[str]:
    like = load.tenant_like
    with psycopg.connect(databases.resolver_dsn, autocommit=True, connect_timeout=3) as conn:
        unpublished = conn.execute(
            "SELECT count(*), coalesce(sum(c.position - coalesce(p.published_position, 0)), 0)"
            " FROM stream_cursor c LEFT JOIN stream_publication p USING"
            " (tenant_id, catalog_id, history_epoch)"
            " WHERE c.tenant_id LIKE %s AND c.fenced_at IS NULL"
            " AND c.position > coalesce(p.published_position, 0)",
            (like,),
        ).fetchone()
        cursors = {
            (t, c, int(e)): int(p)
            for t, c, e, p in conn.execute(
                "SELECT tenant_id, catalog_id, history_epoch, position FROM stream_cursor"
                " WHERE tenant_id LIKE %s AND fenced_at IS NULL",
                (like,),
            ).fetchall()
        }
        unsettled = conn.execute(
            "SELECT count(*) FROM intake_job WHERE tenant_id LIKE %s"
            " AND status NOT IN ('done', 'failed', 'skipped')",
            (like,),
        ).fetchone()
    with psycopg.connect(databases.product_dsn, autocommit=True, connect_timeout=3) as conn:
        progress = {
            (t, c, int(e)): int(p)
            for t, c, e, p in conn.execute(
                "SELECT tenant_id, catalog_id, history_epoch, position FROM stream_progress"
                " WHERE consumer = %s AND tenant_id LIKE %s",
                (CONSUMER, like),
            ).fetchall()
        }
    behind = []
    if unpublished and unpublished[0]:
        behind.append(f"{unpublished[0]} streams unpublished by {unpublished[1]}")
    lagging = {s: c - progress.get(s, 0) for s, c in cursors.items() if progress.get(s, 0) < c}
    if lagging:
        behind.append(f"{len(lagging)} streams unapplied by {sum(lagging.values())}")
    if unsettled and unsettled[0]:
        behind.append(f"{unsettled[0]} capture jobs unsettled")
    return behind


def rebuild_phase(rebuild: Any) -> str | None:
    if rebuild.rebuild_id is None:
        return None
    try:
        row = rebuild._row()
    except psycopg.Error:
        return None
    return row.phase if row is not None else None
