"""``Transaction.defer_checked`` against real PostgreSQL: a refused statement raises
where it is sent, unless the Unit of Work lets errors surface late; then a later
statement raises it, and nothing of the transaction commits."""

from __future__ import annotations

import psycopg.errors
import pytest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from schemas.codec import CODEC

DUPLICATE = "INSERT INTO stream_cursor (tenant_id, catalog_id, history_epoch, position)"
DUPLICATE += " VALUES ('t', 'late', 1, 0)"


@pytest.mark.parametrize("late", [False, True])
def test_a_checked_statement_raises_now_or_at_the_next_one(
    clean_db: DatabaseSettings, late: bool
) -> None:
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=1, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    try:
        with UnitOfWork(pool, epochs, CODEC) as uow:
            uow.stream("t", "late")  # the stream's cursor row exists from here on
            uow.commit()
        with UnitOfWork(pool, epochs, CODEC, late_errors=late) as uow:
            if not late:
                with pytest.raises(psycopg.errors.UniqueViolation):
                    uow.tx.defer_checked(DUPLICATE)
            else:
                uow.tx.defer_checked(DUPLICATE)  # sent later, with the next statement
                with pytest.raises(psycopg.errors.UniqueViolation):
                    uow.tx.execute("SELECT 1").fetchone()
        with pool.connection() as conn:
            rows = conn.execute("SELECT count(*) FROM stream_cursor").fetchone()
        assert rows == (1,)
    finally:
        pool.close()
