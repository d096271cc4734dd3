"""The transaction every read of the operator API runs in."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from db.unit_of_work import Transaction


@contextmanager
def snapshot(conn: psycopg.Connection) -> Iterator[Transaction]:
    """One REPEATABLE READ, READ ONLY transaction on ``conn`` (an autocommit
    connection): everything read inside comes from one snapshot, and no read takes a
    lock a writer would wait for."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield Transaction(conn)
