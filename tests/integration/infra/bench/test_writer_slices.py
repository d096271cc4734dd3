"""Phase (a)'s slices leave each other's streams alone, against real PostgreSQL: a
slice of the sequenced baseline (which has no cursor) between two gapless slices
leaves the gapless writers' known cursors where their commits left them, so the next
gapless slice's decisions are the joined write alone, none refused."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.resolver.commit_notifier import CommitNotifier
from db.settings import DatabaseSettings
from db.unlocked import doubted, known_cursors
from infra.bench.sandbox import Sandbox
from infra.bench.writer import CATALOG, THREADS, WriterBench
from schemas.ids import StreamId


@pytest.fixture()
def bench(clean_db: DatabaseSettings) -> Iterator[tuple[WriterBench, Sandbox]]:
    # The bench works as the resolver's owner (it creates the baseline's table).
    owner = clean_db.model_copy(update={"resolver_dsn": clean_db.resolver_owner_dsn})
    box = Sandbox("slices", owner, "unused:9092", "unused", "unused", "unused")
    epochs = EpochSource(clean_db.control_dsn)
    notifier = CommitNotifier(owner.resolver_dsn, "test-slices").start()
    with ConnectionPool(owner.resolver_dsn, min_size=THREADS, max_size=THREADS) as pool:
        try:
            writers = WriterBench(box, pool, epochs, notifier)
            writers.setup()
            yield writers, box
        finally:
            notifier.close()
            epochs.close()
            with psycopg.connect(owner.resolver_dsn, autocommit=True) as conn:
                conn.execute("DROP TABLE IF EXISTS bench_seq_outbox")


def test_a_baseline_slice_leaves_the_gapless_streams_known_cursors_alone(
    bench: tuple[WriterBench, Sandbox],
) -> None:
    writers, box = bench
    streams = [StreamId(box.tenant(f"w{thread}"), CATALOG, 1) for thread in range(THREADS)]
    writers.run("g1", 0.2, 1, "gapless")
    left = [known_cursors.get(stream) for stream in streams]
    assert all(position is not None and position > 0 for position in left)
    writers.run("s1", 0.2, 1, "sequenced")
    writers.run("n1", 0.2, 1, "sequenced-no-notify")
    writers.run("s100", 0.2, 100, "sequenced")
    assert [known_cursors.get(stream) for stream in streams] == left
    writers.run("g2", 0.2, 1, "gapless")
    assert not [s for s in streams if (s.tenant_id, s.catalog_id) in doubted]
