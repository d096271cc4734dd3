"""One lock order for a catalog's progress rows (issue 29, defect 9), on real
PostgreSQL: the cutover (``db.product.cutover.lock_live``, then the swap) locks the live
consumer's rows of a catalog in the order the applier does (``progress.lock``: older
epochs first).

A live batch holding the older epoch's row (a late copy of an epoch-1 event) that
then takes the current epoch's row must never deadlock with a cutover of the current
epoch. Before the fix the cutover locked the current epoch's row first and the older
one only at the swap: each side then waited for the other, and PostgreSQL rolled one
back (``DeadlockDetected``).
"""

from __future__ import annotations

import threading
import time

import psycopg

from db.product import cutover as sql
from db.settings import DatabaseSettings
from processors.applier import progress
from schemas.ids import StreamId

TENANT, CATALOG, LIVE = "x", "catalog1", "product-applier"
OLD, CURRENT = StreamId(TENANT, CATALOG, 1), StreamId(TENANT, CATALOG, 2)


def _waiting_on_a_lock(dsn: str, pid: int) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
    return bool(row and row[0])


def test_a_cutover_and_a_live_batch_across_two_epochs_never_deadlock(
    clean_db: DatabaseSettings,
) -> None:
    dsn = clean_db.product_dsn
    with psycopg.connect(dsn) as conn:
        for stream in (OLD, CURRENT):
            conn.execute(
                "INSERT INTO stream_progress (consumer, tenant_id, catalog_id, history_epoch,"
                " position, generation) VALUES (%s, %s, %s, %s, 5, 1)",
                (LIVE, *stream),
            )
    errors: list[BaseException] = []
    with psycopg.connect(dsn) as batch, psycopg.connect(dsn) as cut:
        progress.lock(batch, LIVE, [OLD])  # the batch holds the older epoch's row

        def cutover() -> None:
            try:
                with cut.transaction():
                    sql.lock_live(cut, LIVE, CURRENT)
                    sql.swap(cut, LIVE, CURRENT, 2, 9)
            except psycopg.Error as exc:
                errors.append(exc)

        thread = threading.Thread(target=cutover)
        thread.start()
        deadline = time.monotonic() + 10
        while not _waiting_on_a_lock(dsn, cut.info.backend_pid):
            assert time.monotonic() < deadline, "the cutover never waited for the batch"
            time.sleep(0.02)
        # The batch goes on to the current epoch's row: the waiting cutover holds none
        # of the rows it needs.
        try:
            locked = progress.lock(batch, LIVE, [OLD, CURRENT])
            batch.commit()
        except psycopg.errors.DeadlockDetected as exc:
            batch.rollback()
            errors.append(exc)
            locked = {}
        thread.join(timeout=10)
        assert not thread.is_alive()
    assert errors == []
    assert locked[CURRENT].generation == 1  # the batch went first
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT history_epoch, position, generation FROM stream_progress"
            " WHERE consumer = %s ORDER BY history_epoch",
            (LIVE,),
        ).fetchall()
    assert rows == [(1, 5, 2), (2, 9, 2)]  # then the cutover's swap
