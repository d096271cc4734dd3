"""The load's baseline: a bare ``COPY`` of the same rows into empty tables.

The load writes every kind of row of a generation: items, listing mappings, attribute
definitions and values, shipping policy versions, splits, and each item's search
document (with the generated ``tsvector`` and its GIN entry). The baseline copies the
rows of the seeded serving generation (``infra.bench.rebuild_seed``: the same rows
the export then holds, but for the live writer's few) into tables of each
projection table's shape (``LIKE … INCLUDING ALL``: columns, defaults, generated
columns, primary key, indexes) in the same product database, so the same
durability; table by table, in transactions of ``chunk_rows`` rows each, as the load
commits one export chunk per transaction.

The rows are read with ``COPY (SELECT …) TO STDOUT`` on a second connection, a chunk
at a time, and only each chunk's ``COPY … FROM STDIN`` and its ``COMMIT`` are on the
clock: it is the most PostgreSQL takes in, with no parsing, revision checks or
derived text. The item rows' COPYs are timed apart too (the baseline before the
other kinds were counted). The tables are dropped afterwards, whatever happened.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import psycopg
from sqlalchemy import Table

from db.tables.product import (
    product_attribute_definition,
    product_attribute_value,
    product_item,
    product_item_split,
    product_listing_mapping,
    product_search_document,
    product_shipping_policy_version,
)

TABLES = (
    product_item,
    product_attribute_definition,
    product_attribute_value,
    product_listing_mapping,
    product_shipping_policy_version,
    product_item_split,
    product_search_document,
)
"""Every table a rebuild's load writes, in the order the export's kinds come."""


def written_columns(table: Table) -> list[str]:
    """The columns a writer gives: not the generated ones, not ``updated_at``."""
    return [c.name for c in table.columns if c.computed is None and c.name != "updated_at"]


@dataclass(frozen=True, slots=True)
class BareCopy:
    rows: dict[str, int] = field(default_factory=dict)
    """Rows copied, per projection table."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Each table's COPYs and COMMITs."""

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())

    @property
    def items_s(self) -> float:
        return self.seconds.get(product_item.name, 0.0)

    @property
    def item_rows(self) -> int:
        return self.rows.get(product_item.name, 0)


def _chunks(
    conn: psycopg.Connection, query: str, params: tuple[object, ...], rows: int
) -> Iterator[tuple[bytes, int]]:
    """``query``'s rows as COPY text, ``rows`` lines at a time (one line a block)."""
    lines: list[bytes] = []
    with conn.cursor().copy(f"COPY ({query}) TO STDOUT", params) as copy:
        for block in copy:
            lines.append(bytes(block))
            if len(lines) == rows:
                yield b"".join(lines), len(lines)
                lines = []
    if lines:
        yield b"".join(lines), len(lines)


def bare_copy(
    product_dsn: str,
    tenant: str,
    catalog: str,
    generation: int,
    chunk_rows: int,
    echo: Callable[[str], None],
) -> BareCopy:
    """COPY every row of ``generation`` of the catalog into empty tables of the same
    shapes, ``chunk_rows`` a transaction; the rows and seconds per table."""
    copied = BareCopy()
    with psycopg.connect(product_dsn) as source, psycopg.connect(product_dsn) as conn:
        bare = {t.name: f"bench_bare_{t.name}" for t in TABLES}
        for t in TABLES:
            conn.execute(f"CREATE TABLE {bare[t.name]} (LIKE {t.name} INCLUDING ALL)")
        conn.commit()
        try:
            for t in TABLES:
                columns = ", ".join(written_columns(t))
                query = (
                    f"SELECT {columns} FROM {t.name} WHERE generation = %s"
                    " AND tenant_id = %s AND catalog_id = %s"
                )
                rows, seconds = 0, 0.0
                for data, n in _chunks(source, query, (generation, tenant, catalog), chunk_rows):
                    start = time.perf_counter()
                    with conn.cursor().copy(f"COPY {bare[t.name]} ({columns}) FROM STDIN") as copy:
                        copy.write(data)
                    conn.commit()
                    seconds += time.perf_counter() - start
                    rows += n
                source.rollback()
                copied.rows[t.name], copied.seconds[t.name] = rows, seconds
            echo(
                f"rebuild: bare COPY of {copied.total_rows:,} rows took {copied.total_s:.2f} s"
                f" (the {copied.item_rows:,} item rows alone {copied.items_s:.2f} s)"
            )
        finally:
            conn.rollback()
            conn.execute("DROP TABLE IF EXISTS " + ", ".join(bare.values()))
            conn.commit()
    return copied
