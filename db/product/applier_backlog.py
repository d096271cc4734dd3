"""What the applier has set aside, per consumer and stream (product database): parked
events waiting on a dependency, and open quarantine entries. Read by the agents'
``/metrics`` at each scrape; one statement each, in the caller's connection."""

from __future__ import annotations

import psycopg

# (consumer, tenant, catalog, epoch); a quarantined message that never decoded has no
# stream: ("", "", None).
BacklogKey = tuple[str, str, str, int | None]


def parked_counts(conn: psycopg.Connection) -> dict[BacklogKey, int]:
    rows = conn.execute(
        "SELECT consumer, tenant_id, catalog_id, history_epoch, count(*) FROM parked_event"
        " GROUP BY 1, 2, 3, 4"
    ).fetchall()
    return {(str(q), str(t), str(c), int(e)): int(n) for q, t, c, e, n in rows}


def open_quarantine_counts(conn: psycopg.Connection) -> dict[BacklogKey, int]:
    rows = conn.execute(
        "SELECT consumer, coalesce(tenant_id, ''), coalesce(catalog_id, ''), history_epoch,"
        " count(*) FROM quarantine WHERE status = 'open' GROUP BY 1, 2, 3, 4"
    ).fetchall()
    return {
        (str(q), str(t), str(c), None if e is None else int(e)): int(n) for q, t, c, e, n in rows
    }
