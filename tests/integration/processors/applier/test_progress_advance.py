"""Moving several streams' progress in one statement (``progress.advance_all``) ends
exactly where moving each on its own (``progress.advance``) does: at the end of the
contiguous run of terminal outcomes above the progress read, never backwards, the
batch's counts added; a stream without a progress row is answered with its run's
end and no row is made."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from db.settings import DatabaseSettings
from processors.applier import progress
from processors.applier.progress import Counts, Stream

CONSUMER = "advance-all-test"

# Per stream: the inbox outcomes by position, and the progress row's position (None:
# no row). Terminal outcomes end a run only where a position is missing or is parked
# or quarantined.
INBOX: dict[Stream, tuple[dict[int, str], int | None]] = {
    ("adv", "c1", 1): ({1: "applied", 2: "applied", 3: "ignored_stale", 5: "applied"}, 0),
    ("adv", "c2", 1): ({1: "applied", 2: "parked", 3: "applied"}, 0),
    ("adv", "c3", 1): ({4: "applied", 5: "skipped", 6: "applied"}, 3),
    ("adv", "c3", 2): ({1: "quarantined"}, 0),
    ("adv", "c4", 1): ({1: "applied", 2: "applied"}, 9),  # ahead: never moves back
    ("adv", "c5", 1): ({1: "applied", 2: "applied"}, None),  # no progress row
}
COUNTS = Counts(applied=2, duplicates=1, parked=1, released=0, ignored=3)


def _seed(conn: psycopg.Connection) -> None:
    for (tenant, catalog, epoch), (outcomes, position) in INBOX.items():
        for pos, outcome in outcomes.items():
            conn.execute(
                "INSERT INTO inbox (consumer, event_id, tenant_id, catalog_id, history_epoch,"
                " position, event_type, outcome) VALUES (%s, %s, %s, %s, %s, %s, 'x', %s)",
                (CONSUMER, uuid.uuid4(), tenant, catalog, epoch, pos, outcome),
            )
        if position is not None:
            conn.execute(
                "INSERT INTO stream_progress (consumer, tenant_id, catalog_id, history_epoch,"
                " position) VALUES (%s, %s, %s, %s, %s)",
                (CONSUMER, tenant, catalog, epoch, position),
            )


def _rows(conn: psycopg.Connection) -> dict[Stream, tuple[int, ...]]:
    rows = conn.execute(
        "SELECT tenant_id, catalog_id, history_epoch, position, applied_count,"
        " duplicate_count, parked_count, released_count, ignored_count"
        " FROM stream_progress WHERE consumer = %s",
        (CONSUMER,),
    ).fetchall()
    return {(r[0], r[1], int(r[2])): tuple(int(v) for v in r[3:]) for r in rows}


@pytest.fixture()
def conn(clean_db: DatabaseSettings) -> Iterator[psycopg.Connection]:
    with psycopg.connect(clean_db.product_dsn) as conn:
        _seed(conn)
        conn.commit()
        yield conn


def _moves() -> dict[Stream, tuple[int, Counts]]:
    return {s: (position or 0, COUNTS) for s, (_, position) in INBOX.items()}


def test_one_statement_moves_every_stream_as_one_at_a_time_would(
    conn: psycopg.Connection,
) -> None:
    expected: dict[Stream, int] = {}
    for stream, (current, counts) in _moves().items():
        expected[stream] = progress.advance(conn, CONSUMER, stream, current, counts)
    one_by_one = _rows(conn)
    conn.rollback()

    ends = progress.advance_all(conn, CONSUMER, _moves())

    assert ends == expected
    assert ends == {
        ("adv", "c1", 1): 3,
        ("adv", "c2", 1): 1,
        ("adv", "c3", 1): 6,
        ("adv", "c3", 2): 0,
        ("adv", "c4", 1): 9,
        ("adv", "c5", 1): 2,
    }
    assert _rows(conn) == one_by_one
    added = (2, 1, 1, 0, 3)
    assert one_by_one == {
        ("adv", "c1", 1): (3, *added),
        ("adv", "c2", 1): (1, *added),
        ("adv", "c3", 1): (6, *added),
        ("adv", "c3", 2): (0, *added),
        ("adv", "c4", 1): (9, *added),  # GREATEST: its row stays ahead
    }  # c5 has no row, and none is made


def test_a_single_stream_takes_the_one_stream_statement(conn: psycopg.Connection) -> None:
    stream = ("adv", "c1", 1)
    assert progress.advance_all(conn, CONSUMER, {stream: (0, COUNTS)}) == {stream: 3}
    assert progress.advance_all(conn, CONSUMER, {}) == {}
    assert _rows(conn)[stream][0] == 3
