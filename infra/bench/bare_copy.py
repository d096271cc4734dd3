"""The load's baseline: a bare ``COPY`` of the same rows into an empty table.

``bench_bare_item`` is ``product_item``'s shape (``LIKE … INCLUDING ALL``: columns,
defaults, primary key) in the same product database, so the same durability; the
rows are the seeded items' values, in transactions of one chunk's worth of rows
each, as the load commits one chunk per transaction. Only the ``COPY`` and its
``COMMIT`` are on the clock, not building the text in Python: it is the most
PostgreSQL takes in, with no decoding, folding, revision checks or upsert.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg

from infra.bench.rebuild_seed import item_copy_line

COLUMNS = (
    "generation, tenant_id, catalog_id, item_id, class_id, status, title, parent_item_id,"
    " attributes, revision, position"
)


def bare_copy(
    product_dsn: str,
    tenant: str,
    catalog: str,
    items: int,
    position: int,
    chunk_rows: int,
    echo: Callable[[str], None],
) -> float:
    """COPY ``items`` rows in transactions of ``chunk_rows``; the seconds they took.
    The table is dropped afterwards."""
    seconds = 0.0
    with psycopg.connect(product_dsn) as conn:
        conn.execute("CREATE TABLE bench_bare_item (LIKE product_item INCLUDING ALL)")
        conn.commit()
        try:
            for first in range(1, items + 1, chunk_rows):
                last = min(items, first + chunk_rows - 1)
                data = "".join(
                    item_copy_line(1, tenant, catalog, g, position) for g in range(first, last + 1)
                ).encode()
                start = time.perf_counter()
                with conn.cursor().copy(f"COPY bench_bare_item ({COLUMNS}) FROM STDIN") as copy:
                    copy.write(data)
                conn.commit()
                seconds += time.perf_counter() - start
            echo(f"rebuild: bare COPY of {items:,} rows took {seconds:.2f} s")
        finally:
            conn.rollback()
            conn.execute("DROP TABLE bench_bare_item")
            conn.commit()
    return seconds
