"""The write path's baselines write what they stand for, against real PostgreSQL: the
bare bulk write and the SQL replay leave the rows a real decision leaves (items,
effects, contiguous outbox positions), so the bench compares like with like."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.settings import DatabaseSettings
from db.unlocked import known_cursors
from infra.bench.bare_writes import (
    COMMIT,
    SYNC,
    BareBulk,
    RecordingConnection,
    SqlReplay,
    Statement,
)
from infra.bench.writer import CATALOG, row_of, write_gapless


@pytest.fixture()
def pool(clean_db: DatabaseSettings) -> Iterator[ConnectionPool]:
    with ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=2) as p:
        yield p


@pytest.fixture()
def epochs(clean_db: DatabaseSettings) -> Iterator[EpochSource]:
    source = EpochSource(clean_db.control_dsn)
    yield source
    source.close()


def rows(dsn: str, tenant: str) -> tuple[list[str], int, list[int]]:
    with psycopg.connect(dsn) as conn:
        items = [
            r[0]
            for r in conn.execute(
                "SELECT item_id FROM catalog_item WHERE tenant_id = %s ORDER BY item_id",
                (tenant,),
            )
        ]
        effects = conn.execute(
            "SELECT count(*) FROM decision_effect WHERE tenant_id = %s", (tenant,)
        ).fetchone()
        positions = [
            r[0]
            for r in conn.execute(
                "SELECT position FROM outbox WHERE tenant_id = %s ORDER BY position", (tenant,)
            )
        ]
    assert effects is not None
    return items, effects[0], positions


@pytest.mark.parametrize("way", ["known", "unlocked", "locked"])
def test_a_replay_of_a_decisions_statements_writes_a_new_decision_each_time(
    pool: ConnectionPool, epochs: EpochSource, clean_db: DatabaseSettings, way: str
) -> None:
    write_gapless(pool, epochs, "t1", ["first"])
    if way == "unlocked":
        known_cursors.clear()  # as a process that has not written the stream
    unlocked = way != "locked"
    recorded: list[Statement] = []
    with ConnectionPool(
        clean_db.resolver_dsn, min_size=1, max_size=1, connection_class=RecordingConnection
    ) as recorder:
        with recorder.connection() as conn:
            assert isinstance(conn, RecordingConnection)
            conn.recording = recorded
        envelopes = write_gapless(
            recorder,  # type: ignore[arg-type]
            epochs,
            "t1",
            ["recorded"],
            unlocked_reads=unlocked,
        )
    if way == "known":
        # The cursor where this process's commit left it, the item presumed absent:
        # the joined write alone.
        assert [(q.split()[0], p) for q, _, p in recorded] == [("WITH", False)]
    elif way == "unlocked":
        # Two statements, each its own round trip: the items' states with the cursor,
        # then the joined write.
        assert [(q.split()[0], p) for q, _, p in recorded] == [("SELECT", False), ("WITH", False)]
    else:
        # Three round trips (cursor lock, item states, the rest with the COMMIT), and
        # the replay waits where the decision waited.
        assert len(recorded) >= 4
        assert [q for q, _, _ in recorded].count(SYNC) == 3
        assert recorded[0] == ("BEGIN", None, True)
        assert recorded[-2:] == [(COMMIT, None, True), (SYNC, None, True)]
        # Nothing outside the decision's pipelines: a round trip it never made would be
        # replayed (the pool's commit as the recording connection went back sends none).
        assert all(pipelined for _, _, pipelined in recorded)
    replay = SqlReplay.of(recorded, envelopes, "recorded", "again")
    notices: list[str] = []
    with ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=1) as one:
        with one.connection() as conn:
            conn.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
        for _ in range(3):
            assert replay.write(one) == 2
    assert notices == []
    items, effects, positions = rows(clean_db.resolver_dsn, "t1")
    assert items == ["again-0", "again-1", "again-2", "first", "recorded"]
    assert effects == 5 * 2
    assert positions == list(range(1, 11))


def test_the_bare_bulk_write_leaves_a_decisions_rows(
    pool: ConnectionPool, epochs: EpochSource, clean_db: DatabaseSettings
) -> None:
    template = write_gapless(pool, epochs, "t0", ["template"])
    bulk = BareBulk(template)
    bulk.prepare(pool, "t1", CATALOG)
    ids = [f"i{k}" for k in range(100)]
    assert bulk.write(pool, "t1", CATALOG, ids[:50], row_of) == 51
    assert bulk.write(pool, "t1", CATALOG, ids[50:], row_of) == 51
    items, effects, positions = rows(clean_db.resolver_dsn, "t1")
    assert items == sorted(ids)
    assert effects == 102
    assert positions == list(range(1, 103))
