"""The order rows of different resolver tables can be inserted in, from the tables'
foreign keys: a table's rank is one above the highest rank of the tables its
foreign keys name (itself aside), and a table naming none has rank 0. Inserting
lower ranks first, every row finds the rows it references in place
(``db.unit_of_work.Transaction.defer_rows``, which joins inserts of several
decisions and sends them in rank order).

Written out for the tables whose inserts are joined, rather than derived from the
SQLAlchemy metadata when a process first needs one: the write path's processes
then do not load every table's definition. ``tests/unit/db/test_defer_rows.py``
derives them from the metadata and holds them equal.
"""

from __future__ import annotations

RANKS = {
    "decision": 1,  # names review_case
    "decision_effect": 2,  # decision
    "catalog_item": 2,  # decision
    "identity_key": 3,  # catalog_item, decision, identity_generation
    "identity_strong_id": 3,  # catalog_item
    "listing_mapping": 3,  # catalog_item, decision
}


def rank(table: str) -> int:
    """``table``'s insert rank (one of ``RANKS``)."""
    return RANKS[table]
