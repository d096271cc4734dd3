"""Leadership (``db.leadership``) against real PostgreSQL: one holder at a time; a holder
whose session ends (a crash, a terminated backend) loses it and another instance
takes it at its next check; a released leadership is free at once; two names never
exclude each other."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from db.leadership import Leadership, Leaderships
from db.settings import DatabaseSettings


@pytest.fixture()
def leaders(clean_db: DatabaseSettings) -> Iterator[list[Leadership]]:
    made: list[Leadership] = []
    yield made
    for leader in made:
        leader.release()


def _leader(leaders: list[Leadership], dsn: str, name: str) -> Leadership:
    leader = Leadership(dsn, name)
    leaders.append(leader)
    return leader


def _terminate(dsn: str, name: str) -> int:
    """End the backend holding leader ``name``, as a crash of its process would."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %s",
            (f"leader:{name}",),
        ).fetchone()
    return int(row[0]) if row else 0


def test_one_holder_at_a_time(clean_db: DatabaseSettings, leaders: list[Leadership]) -> None:
    dsn = clean_db.product_dsn
    first, second = _leader(leaders, dsn, "t.one"), _leader(leaders, dsn, "t.one")
    assert first.held()
    assert not second.held()
    # Asking again changes nothing on either side (the lock does not stack).
    assert first.held() and first.held()
    assert not second.held()
    first.release()
    assert second.held()
    assert not first.held()


def test_a_holder_whose_session_ends_loses_it_to_the_next(
    clean_db: DatabaseSettings, leaders: list[Leadership]
) -> None:
    dsn = clean_db.product_dsn
    first, second = _leader(leaders, dsn, "t.crash"), _leader(leaders, dsn, "t.crash")
    assert first.held() and not second.held()
    # Both instances' sessions carry the name; only the holder's backend has the lock,
    # so end both: the holder must notice, and whoever asks first after it wins.
    assert _terminate(dsn, "t.crash") == 2
    assert second.held()
    assert not first.held()
    assert second.held()


def test_names_are_independent(clean_db: DatabaseSettings, leaders: list[Leadership]) -> None:
    dsn = clean_db.product_dsn
    assert _leader(leaders, dsn, "t.a").held()
    assert _leader(leaders, dsn, "t.b").held()
    assert not _leader(leaders, dsn, "t.a").held()


def test_an_unreachable_database_is_not_held(leaders: list[Leadership]) -> None:
    # Nothing listens on port 1: the check fails quickly and says no, it never raises.
    leader = _leader(leaders, "postgresql://gapless@127.0.0.1:1/none", "t.down")
    assert not leader.held()


def test_several_leases_on_one_session_end_together_with_it(clean_db: DatabaseSettings) -> None:
    """``Leaderships``: names held on one session; another session's instance is refused
    them, gets one given up at once, and all of them when the holder's session ends
    (as a crash of its process ends it)."""
    dsn = clean_db.product_dsn
    holder, other = Leaderships(dsn, "leaders:holder"), Leaderships(dsn, "leaders:other")
    try:
        assert holder.take("r.1") and holder.take("r.2") and holder.take("r.1")
        assert holder.held() == {"r.1", "r.2"}
        assert not other.take("r.1") and not other.take("r.2")
        holder.release("r.2")
        assert other.take("r.2") and not holder.take("r.2")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'leaders:holder'"
            )
        assert other.take("r.1")
        assert not holder.take("r.1")  # asks again on a new session: taken meanwhile
        assert holder.held() == frozenset()
    finally:
        holder.close()
        other.close()
