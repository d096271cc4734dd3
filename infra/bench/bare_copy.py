"""The load's baseline: a bare ``COPY`` of the same rows into empty tables.

The load writes two rows per item: its ``product_item`` row and its search document
(``product_search_document``, with the generated ``tsvector`` and its GIN entry). The
baseline copies the same rows with the seeded items' values into ``bench_bare_item``
and ``bench_bare_search_document``, each of its table's shape (``LIKE … INCLUDING
ALL``: columns, defaults, generated columns, primary key, indexes) in the same
product database, so the same durability; in transactions of one chunk's worth of
items each, as the load commits one chunk per transaction. Only the ``COPY``s and
the ``COMMIT`` are on the clock, not building the text in Python: it is the most
PostgreSQL takes in, with no parsing, revision checks or derived text. The items'
COPY alone is timed too (the baseline before the documents were counted).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from infra.bench.rebuild_seed import document_copy_line, item_copy_line

COLUMNS = (
    "generation, tenant_id, catalog_id, item_id, class_id, status, title, parent_item_id,"
    " attributes, revision, position"
)
DOCUMENT_COLUMNS = (
    "generation, tenant_id, catalog_id, item_id, title, status, attribute_text,"
    " item_revision, position"
)


@dataclass(frozen=True, slots=True)
class BareCopy:
    items_s: float
    """The item rows' COPYs."""
    documents_s: float
    """The search documents' COPYs (and each chunk's COMMIT)."""

    @property
    def seconds(self) -> float:
        return self.items_s + self.documents_s


def bare_copy(
    product_dsn: str,
    tenant: str,
    catalog: str,
    items: int,
    position: int,
    chunk_rows: int,
    echo: Callable[[str], None],
) -> BareCopy:
    """COPY ``items`` item rows and as many documents, in transactions of
    ``chunk_rows`` items; the seconds they took. The tables are dropped afterwards."""
    items_s = documents_s = 0.0
    with psycopg.connect(product_dsn) as conn:
        conn.execute("CREATE TABLE bench_bare_item (LIKE product_item INCLUDING ALL)")
        conn.execute(
            "CREATE TABLE bench_bare_search_document (LIKE product_search_document INCLUDING ALL)"
        )
        conn.commit()
        try:
            for first in range(1, items + 1, chunk_rows):
                numbers = range(first, min(items, first + chunk_rows - 1) + 1)
                rows = "".join(item_copy_line(1, tenant, catalog, g, position) for g in numbers)
                documents = "".join(
                    document_copy_line(1, tenant, catalog, g, position) for g in numbers
                )
                start = time.perf_counter()
                with conn.cursor().copy(f"COPY bench_bare_item ({COLUMNS}) FROM STDIN") as copy:
                    copy.write(rows.encode())
                between = time.perf_counter()
                with conn.cursor().copy(
                    f"COPY bench_bare_search_document ({DOCUMENT_COLUMNS}) FROM STDIN"
                ) as copy:
                    copy.write(documents.encode())
                conn.commit()
                end = time.perf_counter()
                items_s += between - start
                documents_s += end - between
            echo(
                f"rebuild: bare COPY of {items:,} items and their documents took"
                f" {items_s + documents_s:.2f} s (the items alone {items_s:.2f} s)"
            )
        finally:
            conn.rollback()
            conn.execute("DROP TABLE bench_bare_item, bench_bare_search_document")
            conn.commit()
    return BareCopy(items_s, documents_s)
