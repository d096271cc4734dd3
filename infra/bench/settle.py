"""Letting PostgreSQL finish what one phase left behind before the next one measures.

The phases write into the same sandbox databases one after another: phase (c) and
the deployed agents' backlog (e) put over 100,000 rows into the product database,
the writers before them as many into the resolver's. Autovacuum and the
checkpointer then work on those tables for tens of seconds, and a phase that starts
meanwhile measures their CPU and their I/O as its own: the deployed phase (f) at 200
events/s found PostgreSQL spending 5 ms of CPU per event, against 2.6 ms when it ran
alone. So before such a phase the bench does that work itself:

1. ``VACUUM (ANALYZE)`` each database (the tables' dead rows and statistics, which
   is what autovacuum would have come for);
2. a ``CHECKPOINT`` (the dirty buffers written now rather than during the phase),
   skipped with a word when the bench's login may not ask for one;
3. wait until no autovacuum worker is busy in those databases, at most
   ``timeout_s``; one still running then is reported and the phase goes on.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import psycopg
from psycopg.conninfo import conninfo_to_dict

from infra.bench.sandbox import Echo, Sandbox

SETTLE_TIMEOUT_S = 120.0
POLL_S = 0.2


def settle(dsns: Sequence[str], echo: Echo, timeout_s: float = SETTLE_TIMEOUT_S) -> float:
    """Steps 1-3 of the module docstring for the databases ``dsns`` name; the seconds
    it took."""
    started = time.monotonic()
    names = [str(conninfo_to_dict(dsn).get("dbname", "")) for dsn in dsns]
    for dsn in dsns:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM (ANALYZE)")
    with psycopg.connect(dsns[0], autocommit=True) as conn:
        try:
            conn.execute("CHECKPOINT")
        except psycopg.errors.InsufficientPrivilege:
            echo("settle: this login may not ask for a CHECKPOINT; going on without one")
        deadline = time.monotonic() + timeout_s
        while (busy := _autovacuum_workers(conn, names)) > 0:
            if time.monotonic() > deadline:
                echo(f"settle: {busy} autovacuum worker(s) still busy after {timeout_s:.0f}s")
                break
            time.sleep(POLL_S)
    return time.monotonic() - started


def _autovacuum_workers(conn: psycopg.Connection, names: list[str]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE backend_type = 'autovacuum worker' AND datname = ANY(%s)",
        (names,),
    ).fetchone()
    return int(row[0]) if row else 0


def settle_sandbox(box: Sandbox, echo: Echo) -> None:
    """``settle`` the sandbox's three databases before a phase."""
    dbs = box.databases
    took = settle([dbs.resolver_dsn, dbs.product_dsn, dbs.control_dsn], echo)
    echo(f"settle: the databases vacuumed, checkpointed and quiet in {took:.1f}s")
