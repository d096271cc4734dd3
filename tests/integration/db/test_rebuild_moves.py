"""A rebuild step's moves (``db.product.rebuilds.move``) on real PostgreSQL: only from the
phase and attempt the step began in, under its own claim; never away from a
recorded swap except to ``done``; a claim another worker holds raises."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from db.exceptions import RebuildClaimLost
from db.product import rebuilds as sql
from db.settings import DatabaseSettings
from schemas.ids import StreamId

STREAM = StreamId("x", "catalog1", 1)


def _rebuild(conn: psycopg.Connection, worker: str) -> uuid.UUID:
    rebuild_id = uuid.uuid4()
    assert sql.insert(conn, rebuild_id, "live", STREAM, "shadow", "op", "t")
    assert sql.claim(conn, rebuild_id, worker, 60)
    return rebuild_id


def test_a_move_needs_the_steps_phase_attempt_and_claim(clean_db: DatabaseSettings) -> None:
    with psycopg.connect(clean_db.product_dsn) as conn:
        rebuild_id = _rebuild(conn, "a")
        step = {"in_attempt": 1, "claimed_by": "a"}
        assert sql.move(conn, rebuild_id, "leased", expect="leased", **step) is None
        assert (
            sql.move(conn, rebuild_id, "leased", expect="requested", in_attempt=2, claimed_by="a")
            is None
        )
        moved = sql.move(conn, rebuild_id, "leased", expect="requested", **step)
        assert moved is not None and moved.phase == "leased" and moved.claimed_by == "a"
        # Another worker's claim (a's ran out): a's next move raises, and changes nothing.
        conn.execute(
            "UPDATE rebuild SET claim_expires_at = clock_timestamp() - interval '1 second'"
        )
        assert sql.claim(conn, rebuild_id, "b", 60)
        assert not sql.claim(conn, rebuild_id, "a", 60)
        with pytest.raises(RebuildClaimLost):
            sql.move(conn, rebuild_id, "exporting", expect="leased", **step)
        with pytest.raises(RebuildClaimLost):
            sql.renew(conn, rebuild_id, "a", 60)
        assert sql.renew(conn, rebuild_id, "b", 60)
        assert sql.get(conn, rebuild_id).phase == "leased"  # type: ignore[union-attr]
        # Whoever holds the rebuild's lock takes the claim at once.
        assert sql.claim(conn, rebuild_id, "a", 60, locked=True)


def test_after_the_swap_a_rebuild_can_only_finish(clean_db: DatabaseSettings) -> None:
    with psycopg.connect(clean_db.product_dsn) as conn:
        rebuild_id = _rebuild(conn, "a")
        sql.update(conn, rebuild_id, "cutting_over", previous_generation=1, lease_id=uuid.uuid4())
        step = {"expect": "cutting_over", "in_attempt": 1, "claimed_by": "a"}
        for back in ("requested", "catching_up", "failed"):
            changes = {"error_code": "X"} if back == "failed" else {}
            assert sql.move(conn, rebuild_id, back, **step, **changes) is None, back
        done = sql.move(conn, rebuild_id, "done", **step)
        assert done is not None and done.phase == "done" and done.finished_at is not None
        # Finished: nothing to claim or renew, and no move from it.
        assert not sql.claim(conn, rebuild_id, "a", 60, locked=True)
        assert not sql.renew(conn, rebuild_id, "a", 60)
        assert sql.move(conn, rebuild_id, "requested", **step) is None
