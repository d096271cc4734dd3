"""Rows deferred by several decisions join one statement per table, sent in the
order of the tables' foreign keys (``Transaction.defer_rows``, ``db.insert_ranks``).
Pure: nothing is sent; the queue is what would be."""

from __future__ import annotations

from typing import Any, cast

import psycopg
import pytest

from db.insert_ranks import RANKS, rank
from db.tables import metadata_of
from db.unit_of_work import Statement, Transaction


def _tx(late_errors: bool = True) -> tuple[Transaction, list[Statement]]:
    queue: list[Statement] = []
    conn = cast(psycopg.Connection, None)  # never used: nothing is sent
    return Transaction(conn, queue, late_errors=late_errors, groups={}), queue


def _rows(tx: Transaction, table: str, ids: list[str], scalar: str = "t1") -> None:
    tx.defer_rows(f"INSERT INTO {table}", {"t": scalar, "ids": ids}, ("ids",), rank(table))


def _sent(queue: list[Statement]) -> list[tuple[str, Any]]:
    return [(q, dict(p)["ids"] if isinstance(p, dict) else p) for q, p in queue]


def test_the_rows_of_one_statement_join_whatever_came_between() -> None:
    tx, queue = _tx()
    _rows(tx, "decision", ["d1"])
    _rows(tx, "catalog_item", ["i1"])
    _rows(tx, "decision", ["d2"])
    _rows(tx, "catalog_item", ["i2", "i3"])
    _rows(tx, "catalog_item", ["x"], scalar="t2")  # other parameters: its own statement
    assert _sent(queue) == [
        ("INSERT INTO decision", ["d1", "d2"]),
        ("INSERT INTO catalog_item", ["i1", "i2", "i3"]),
        ("INSERT INTO catalog_item", ["x"]),
    ]


def test_a_table_first_seen_later_goes_before_the_tables_that_reference_it() -> None:
    """The first decision updated its item (no insert), the second creates one: the
    second's keys must not go in before its item, joined as they are with the
    first's keys, queued before."""
    tx, queue = _tx()
    _rows(tx, "decision", ["d1"])
    _rows(tx, "identity_key", ["k1"])
    _rows(tx, "decision_effect", ["e1"])
    _rows(tx, "decision", ["d2"])
    _rows(tx, "catalog_item", ["i2"])
    _rows(tx, "identity_key", ["k2"])
    order = [q.removeprefix("INSERT INTO ") for q, _ in _sent(queue)]
    assert order.index("catalog_item") < order.index("identity_key")
    assert order[0] == "decision"
    assert _sent(queue)[order.index("identity_key")][1] == ["k1", "k2"]


def test_another_deferred_statement_ends_the_joining() -> None:
    tx, queue = _tx()
    _rows(tx, "catalog_item", ["i1"])
    tx.defer("UPDATE capture_item", ())
    _rows(tx, "decision", ["d2"])  # a lower rank, still after the statement between
    _rows(tx, "catalog_item", ["i2"])
    assert _sent(queue) == [
        ("INSERT INTO catalog_item", ["i1"]),
        ("UPDATE capture_item", ()),
        ("INSERT INTO decision", ["d2"]),
        ("INSERT INTO catalog_item", ["i2"]),
    ]


def test_without_late_errors_every_call_is_a_statement_of_its_own() -> None:
    tx, queue = _tx(late_errors=False)
    _rows(tx, "decision", ["d1"])
    _rows(tx, "decision", ["d2"])
    assert _sent(queue) == [("INSERT INTO decision", ["d1"]), ("INSERT INTO decision", ["d2"])]


def _derived(table: str, seen: frozenset[str] = frozenset()) -> int:
    """A table's rank from the metadata: one above the tables its foreign keys name."""
    tables = metadata_of("resolver").tables
    named = {fk.column.table.name for fk in tables[table].foreign_keys} - {table}
    assert not named & seen, f"the foreign keys of {table} run in a circle"
    return 1 + max((_derived(n, seen | {table}) for n in named), default=-1)


@pytest.mark.parametrize("table", sorted(RANKS))
def test_a_table_ranks_above_every_table_its_foreign_keys_name(table: str) -> None:
    named = {fk.column.table.name for fk in metadata_of("resolver").tables[table].foreign_keys}
    assert named - {table}, f"{table} names no other table: this test would prove nothing"
    assert RANKS[table] == _derived(table)
    assert all(_derived(other) < rank(table) for other in named - {table})
