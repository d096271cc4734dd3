"""Where each stream stands, read without locking anything: its committed cursor,
its published position, how far it is pruned, and how long its oldest unpublished
row has waited (the relay's lag in seconds).

The age is the database clock (``clock_timestamp()``) minus the ``committed_at`` of
the first outbox row above the published position, found by the outbox's primary
key; it is None when nothing waits, and on a fenced stream, whose rows above the
published position stay unpublished on purpose (history, not a backlog).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from schemas.ids import StreamId


@dataclass(frozen=True, slots=True)
class StreamPositions:
    stream: StreamId
    committed: int
    published: int
    pruned_through: int
    unpublished_age_s: float | None = None
    """Seconds since the oldest unpublished row was committed (None: none waits)."""


def stream_positions(
    conn: psycopg.Connection,
    stream: StreamId | None = None,
    *,
    tenants: frozenset[str] | None = None,
    after: StreamId | None = None,
    limit: int | None = None,
    catalog: str | None = None,
    matching: str | None = None,
) -> list[StreamPositions]:
    """The positions of one stream or of every stream that has written or is under
    retention control, in stream order; optionally only ``tenants``', only the
    ``catalog``'s, only those whose ``tenant/catalog`` contains ``matching`` (any
    case), and only streams after ``after``, at most ``limit`` of them."""
    clauses: list[str] = []
    params: list[Any] = []
    if stream:
        clauses.append("s.tenant_id = %s AND s.catalog_id = %s AND s.history_epoch = %s")
        params += [stream.tenant_id, stream.catalog_id, stream.history_epoch]
    if tenants is not None:
        clauses.append("s.tenant_id = ANY(%s)")
        params.append(sorted(tenants))
    if catalog is not None:
        clauses.append("s.catalog_id = %s")
        params.append(catalog)
    if matching:
        clauses.append("strpos(lower(s.tenant_id || '/' || s.catalog_id), lower(%s)) > 0")
        params.append(matching)
    if after:
        clauses.append("(s.tenant_id, s.catalog_id, s.history_epoch) > (%s, %s, %s)")
        params += [after.tenant_id, after.catalog_id, after.history_epoch]
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    where += " ORDER BY s.tenant_id, s.catalog_id, s.history_epoch"
    if limit is not None:
        where += " LIMIT %s"
        params.append(limit)
    rows = conn.execute(
        "SELECT s.tenant_id, s.catalog_id, s.history_epoch, coalesce(c.position, 0),"
        " coalesce(p.published_position, 0), coalesce(r.pruned_through, 0),"
        " extract(epoch FROM clock_timestamp() - w.committed_at)"
        " FROM (SELECT tenant_id, catalog_id, history_epoch FROM stream_cursor"
        "  UNION SELECT tenant_id, catalog_id, history_epoch FROM stream_retention) s"
        " LEFT JOIN stream_cursor c USING (tenant_id, catalog_id, history_epoch)"
        " LEFT JOIN stream_publication p USING (tenant_id, catalog_id, history_epoch)"
        " LEFT JOIN stream_retention r USING (tenant_id, catalog_id, history_epoch)"
        " LEFT JOIN LATERAL (SELECT o.committed_at FROM outbox o"
        "  WHERE o.tenant_id = s.tenant_id AND o.catalog_id = s.catalog_id"
        "  AND o.history_epoch = s.history_epoch"
        "  AND o.position > coalesce(p.published_position, 0)"
        "  AND c.fenced_at IS NULL"
        "  ORDER BY o.position LIMIT 1) w ON true"
        f"{where}",
        params,
    ).fetchall()
    return [
        StreamPositions(
            StreamId(t, c, int(e)),
            int(committed),
            int(published),
            int(pruned),
            None if age is None else max(0.0, float(age)),
        )
        for t, c, e, committed, published, pruned, age in rows
    ]
