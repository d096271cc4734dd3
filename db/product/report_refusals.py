"""Progress reports the resolver refused, one row per consumer and stream
(``report_refusal``, product database).

The progress reporter (``processors.reporter``) records a refusal for the stream it
concerns and goes on with the next stream; the row says what was refused (position,
the resolver's code and message) and since when, for ``gapless status`` and the
``gapless_progress_report_refused`` gauge. It goes when the resolver acknowledges a
report of that stream again, or when the stream's epoch is fenced (it is not
reported any more). Each call is one statement in the caller's transaction, so a
crash leaves either the old row or the new one, never half of one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

Stream = tuple[str, str, int]


@dataclass(frozen=True, slots=True)
class Refusal:
    consumer: str
    stream: Stream
    position: int
    code: str
    """The resolver's code (``POSITION_BEYOND_COMMITTED``, ``CONSUMER_NEEDS_REBUILD`` …)."""
    message: str
    refused_at: datetime
    """Since when this refusal (this code at this position) stands."""


def record(
    conn: psycopg.Connection,
    consumer: str,
    stream: Stream,
    position: int,
    code: str,
    message: str,
) -> Refusal:
    """Record (or replace) the stream's refusal; ``refused_at`` stays when the same
    code refuses the same position again, so it says since when it stands."""
    row = conn.execute(
        "INSERT INTO report_refusal AS r (consumer, tenant_id, catalog_id, history_epoch,"
        " position, code, message) VALUES (%s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (consumer, tenant_id, catalog_id, history_epoch) DO UPDATE SET"
        " position = excluded.position, code = excluded.code, message = excluded.message,"
        " refused_at = CASE WHEN r.position = excluded.position AND r.code = excluded.code"
        " THEN r.refused_at ELSE excluded.refused_at END RETURNING r.refused_at",
        (consumer, *stream, position, code, message[:2000]),
    ).fetchone()
    assert row is not None
    return Refusal(consumer, stream, position, code, message[:2000], row[0])


def clear(conn: psycopg.Connection, consumer: str, stream: Stream) -> bool:
    """Remove the stream's refusal; False if it had none."""
    return (
        conn.execute(
            "DELETE FROM report_refusal WHERE consumer = %s AND tenant_id = %s"
            " AND catalog_id = %s AND history_epoch = %s",
            (consumer, *stream),
        ).rowcount
        > 0
    )


def listed(conn: psycopg.Connection, consumer: str | None = None) -> list[Refusal]:
    """Every refusal standing (of ``consumer`` only, when given), in stream order."""
    rows = conn.execute(
        "SELECT consumer, tenant_id, catalog_id, history_epoch, position, code, message,"
        " refused_at FROM report_refusal WHERE %(c)s::text IS NULL OR consumer = %(c)s"
        " ORDER BY tenant_id, catalog_id, history_epoch, consumer",
        {"c": consumer},
    ).fetchall()
    return [
        Refusal(str(q), (str(t), str(c), int(e)), int(p), str(code), str(m), at)
        for q, t, c, e, p, code, m, at in rows
    ]
