"""The order rows of different resolver tables can be inserted in, from the tables'
foreign keys: a table's rank is one above the highest rank of the tables its
foreign keys name (itself aside), and a table naming none has rank 0. Inserting
lower ranks first, every row finds the rows it references in place
(``db.unit_of_work.Transaction.defer_rows``, which joins inserts of several
decisions and sends them in rank order).
"""

from __future__ import annotations

from functools import cache

from db.tables import metadata_of


@cache
def rank(table: str) -> int:
    """``table``'s insert rank (a resolver table whose foreign keys, followed from
    it, never come back to a table on the way)."""
    tables = metadata_of("resolver").tables

    def walk(name: str, seen: frozenset[str]) -> int:
        named = {fk.column.table.name for fk in tables[name].foreign_keys} - {name}
        assert not named & seen, f"the foreign keys of {table} run in a circle via {name}"
        return 1 + max((walk(n, seen | {name}) for n in named), default=-1)

    return walk(table, frozenset({table}))
