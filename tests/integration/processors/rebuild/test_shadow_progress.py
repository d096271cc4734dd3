"""A rebuild's shadow applies into its rebuild's generation only, and never makes its
own progress row (issue 29, defect 4), on real services.

Before the fix, a shadow whose progress row vanished (its rebuild restarted or
cleaned up under it) recreated the row in generation 1, which may be the serving
one, and applied its catch-up there. Now the row missing, or in another generation,
raises ``SHADOW_PROGRESS_LOST`` with nothing written, and the rebuild starts over.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest

from db.product import rebuilds
from db.settings import DatabaseSettings
from processors.applier import progress, skips
from processors.applier.exceptions import ShadowProgressLost
from schemas.ids import StreamId
from tests.integration.processors.rebuild.two_workers import STREAM, TwoWorkers

SHADOW = "product-applier~rebuild-test"


def _rows(dsn: str, consumer: str) -> list[tuple[int, int]]:
    with psycopg.connect(dsn) as conn:
        return [
            (int(e), int(g))
            for e, g in conn.execute(
                "SELECT history_epoch, generation FROM stream_progress WHERE consumer = %s",
                (consumer,),
            ).fetchall()
        ]


def test_a_bound_shadow_locks_only_its_own_row_in_its_generation(
    clean_db: DatabaseSettings,
) -> None:
    dsn = clean_db.product_dsn
    with psycopg.connect(dsn) as conn:
        with pytest.raises(ShadowProgressLost):
            progress.lock(conn, SHADOW, [STREAM], generation=2)
        conn.rollback()
        assert _rows(dsn, SHADOW) == []  # nothing created
        conn.execute(
            "INSERT INTO stream_progress (consumer, tenant_id, catalog_id, history_epoch,"
            " position, generation) VALUES (%s, %s, %s, %s, 7, 2)",
            (SHADOW, *STREAM),
        )
        conn.commit()
        assert progress.lock(conn, SHADOW, [STREAM], generation=2)[STREAM].position == 7
        conn.rollback()
        with pytest.raises(ShadowProgressLost, match="generation 3"):
            progress.lock(conn, SHADOW, [STREAM], generation=3)
        conn.rollback()
        # Unbound (the live consumer), a missing row is made as before.
        assert progress.lock(conn, "live", [STREAM])[STREAM].generation == 1
        conn.commit()
    assert _rows(dsn, "live") == [(1, 1)]


def test_a_shadow_whose_progress_row_vanished_starts_over_and_never_writes_elsewhere(
    two: TwoWorkers,
) -> None:
    two.feed_live()
    rebuild_id = two.request()
    row = two.until(two.a, rebuild_id, "catching_up")
    assert row.generation == 2
    two.write(200)  # the catch-up has events to apply

    def vanish() -> None:  # between fetching a page and applying it
        with psycopg.connect(two.settings.product_dsn) as conn:
            conn.execute("DELETE FROM stream_progress WHERE consumer = %s", (row.shadow_consumer,))

    two.a_client.meanwhile = vanish
    after = two.a.advance(rebuild_id)
    # Nothing applied: no row made (in generation 1 or any), no outcome recorded.
    assert _rows(two.settings.product_dsn, row.shadow_consumer) == []
    assert two.shadow_rows(row.shadow_consumer) == (0, 0)
    assert after is not None
    assert (after.phase, after.attempt) == ("requested", 2)
    assert after.error_code == "SHADOW_PROGRESS_LOST"
    # The first attempt's load figures went with it (the next load records its own).
    assert row.rows_total is not None and row.rows_total > 0
    assert (after.rows_total, after.rows_by_kind, after.load_cost) == (None, {}, {})
    assert two.live_generation() == 1
    done = two.until(two.a, rebuild_id, "done")
    assert (done.phase, done.attempt, done.generation) == ("done", 2, 3)
    assert two.live_generation() == 3
    assert two.feed_live() == two.committed()
    two.accepted_equals(3)


def test_an_operators_repair_of_a_shadow_entry_never_makes_its_row_elsewhere(
    clean_db: DatabaseSettings,
) -> None:
    """A skip or retry of a shadow's entry goes through ``progress.lock`` too: bound to
    the rebuild's generation while the shadow applies, refused while it does not
    (before, the repair made the missing row in generation 1)."""
    dsn = clean_db.product_dsn
    rebuild_id = uuid.uuid4()
    with psycopg.connect(dsn) as conn:
        rebuilds.insert(conn, rebuild_id, "live", StreamId(*STREAM), SHADOW, "test", "repair")
        conn.commit()
        # Requested (restarted, say): the shadow has no row, the repair is refused.
        with pytest.raises(ShadowProgressLost, match="not applying"):
            skips.skip_position(conn, SHADOW, STREAM, 5)
        conn.rollback()
        assert _rows(dsn, SHADOW) == []
        # Catching up in generation 2: the repair moves the shadow's own row there.
        rebuilds.update(conn, rebuild_id, "catching_up", generation=2)
        conn.execute(
            "INSERT INTO stream_progress (consumer, tenant_id, catalog_id, history_epoch,"
            " position, generation) VALUES (%s, %s, %s, %s, 4, 2)",
            (SHADOW, *STREAM),
        )
        conn.commit()
        assert progress.bound_generation(conn, SHADOW) == 2
        assert skips.skip_position(conn, SHADOW, STREAM, 5) == 5
        conn.commit()
        # A live consumer is bound to nothing: its rows say where it serves.
        assert progress.bound_generation(conn, "live") is None
    assert _rows(dsn, SHADOW) == [(STREAM[2], 2)]
