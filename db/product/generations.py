"""Projection generations no one serves or builds any more, and a finished rebuild's
shadow rows: found and removed in bounded batches (product database).

A generation is in use while a progress row points at it (a consumer serves it, or
a shadow builds it) or an unfinished rebuild loads it. Every other generation of a
catalog is retired: the newest ``keep`` retired ones stay (for inspection), older
ones are deleted batch by batch, each batch its own short transaction, so neither
serving nor the live applier ever waits on a cleanup. A crash between batches leaves
some rows of a retired generation: nothing reads them, and the next pass goes on.
"""

from __future__ import annotations

import psycopg
from sqlalchemy import Table

from db.tables.product import metadata


def projection_tables() -> tuple[Table, ...]:
    """Every table that keeps rows per projection generation (progress rows and
    rebuild rows name a generation; they do not keep one)."""
    import db.tables.rebuilds  # noqa: F401  (the rebuild table is in the same metadata)

    return tuple(
        t
        for t in metadata.sorted_tables
        if "generation" in t.c and t.name not in ("stream_progress", "rebuild")
    )


def retired(conn: psycopg.Connection, keep: int) -> list[tuple[str, str, int]]:
    """(tenant, catalog, generation) of every retired generation that still has rows,
    past the newest ``keep`` retired ones of its catalog.

    Only rebuilds make generations other than the first, and each takes one above
    every generation named before, so the candidates of a catalog are 1 up to the
    highest a rebuild took (an attempt that started over left its own). Each one
    past ``keep`` is then probed table by table on the key prefix (generation,
    tenant, catalog): a few index probes, never a scan of a projection."""
    candidates = conn.execute(
        "WITH named AS (SELECT m.tenant_id, m.catalog_id, g.generation FROM"
        "  (SELECT tenant_id, catalog_id, max(generation) AS top FROM rebuild"
        "   WHERE generation IS NOT NULL GROUP BY tenant_id, catalog_id) m"
        "  CROSS JOIN LATERAL generate_series(1, m.top) AS g(generation)),"
        " idle AS (SELECT g.*, row_number() OVER (PARTITION BY g.tenant_id, g.catalog_id"
        "  ORDER BY g.generation DESC) AS n FROM named g"
        "  WHERE NOT EXISTS (SELECT 1 FROM stream_progress p WHERE p.tenant_id = g.tenant_id"
        "   AND p.catalog_id = g.catalog_id AND p.generation = g.generation)"
        "  AND NOT EXISTS (SELECT 1 FROM rebuild r WHERE r.tenant_id = g.tenant_id"
        "   AND r.catalog_id = g.catalog_id AND r.generation = g.generation"
        "   AND r.phase NOT IN ('done', 'failed', 'cancelled')))"
        " SELECT tenant_id, catalog_id, generation FROM idle WHERE n > %s"
        " ORDER BY tenant_id, catalog_id, generation",
        (keep,),
    ).fetchall()
    return [
        (str(t), str(c), int(g))
        for t, c, g in candidates
        if any(_has_rows(conn, table, str(t), str(c), int(g)) for table in projection_tables())
    ]


def _has_rows(
    conn: psycopg.Connection, table: Table, tenant: str, catalog: str, generation: int
) -> bool:
    row = conn.execute(
        f"SELECT EXISTS (SELECT 1 FROM {table.name} WHERE generation = %s"
        " AND tenant_id = %s AND catalog_id = %s)",
        (generation, tenant, catalog),
    ).fetchone()
    return bool(row and row[0])


def delete_batch(
    conn: psycopg.Connection, table: Table, tenant: str, catalog: str, generation: int, limit: int
) -> int:
    """Delete up to ``limit`` rows of one generation from one table; the count."""
    key = ", ".join(c.name for c in table.primary_key.columns)
    return conn.execute(
        f"DELETE FROM {table.name} WHERE ({key}) IN (SELECT {key} FROM {table.name}"
        " WHERE generation = %s AND tenant_id = %s AND catalog_id = %s LIMIT %s)",
        (generation, tenant, catalog, limit),
    ).rowcount


SHADOW_TABLES = ("parked_dependency", "parked_event", "inbox", "consumer_offset")


def delete_consumer_batch(conn: psycopg.Connection, table: str, consumer: str, limit: int) -> int:
    """Up to ``limit`` rows of a finished shadow consumer from one of its tables."""
    assert table in SHADOW_TABLES
    return conn.execute(
        f"DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {table}"
        " WHERE consumer = %s LIMIT %s))",
        (consumer, limit),
    ).rowcount


def drop_consumer(conn: psycopg.Connection, consumer: str, note: str) -> None:
    """A finished shadow's last rows: its progress rows go (so its generation is no
    longer in use) and its open quarantine entries become ``superseded``."""
    conn.execute("DELETE FROM stream_progress WHERE consumer = %s", (consumer,))
    conn.execute(
        "UPDATE quarantine SET status = 'superseded', resolved_at = now(), resolution = %s"
        " WHERE consumer = %s AND status = 'open'",
        (note, consumer),
    )
