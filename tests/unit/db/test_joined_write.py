"""Statements joined into one (``db.joined_write``) and the reads an unlocked unit
may run (pure: the text and parameters of what would be sent)."""

from __future__ import annotations

import pytest

from db.exceptions import StreamFenced
from db.joined_write import (
    JoinedWrite,
    LockNeeded,
    joinable,
    refuse_unlocked_read,
    rename,
    written_table,
)
from db.stream_writer import cursor_of, with_cursor
from db.unlocked import Contended
from schemas.ids import StreamId


def test_rename_names_positional_and_named_placeholders_apart() -> None:
    query, params = rename("INSERT INTO t VALUES (%s, %b, %s::jsonb)", ("a", b"b", "{}"), "w1")
    assert query == "INSERT INTO t VALUES (%(w1_0)s, %(w1_1)b, %(w1_2)s::jsonb)"
    assert params == {"w1_0": "a", "w1_1": b"b", "w1_2": "{}"}
    query, params = rename("SELECT %(t)s, %(ids)b::text[], %(t)s, 100%%", {"t": 1, "ids": []}, "w2")
    assert query == "SELECT %(w2_t)s, %(w2_ids)b::text[], %(w2_t)s, 100%%"
    assert params == {"w2_t": 1, "w2_ids": []}
    query, params = rename("SELECT 1", None, "w3")
    assert (query, params) == ("SELECT 1", {})


def test_rename_refuses_mixed_placeholder_styles() -> None:
    with pytest.raises(ValueError, match="positional"):
        rename("SELECT %(a)s, %s", {"a": 1}, "w0")


def test_a_joined_write_puts_every_part_in_one_statement_with_its_checks_in_order() -> None:
    write = JoinedWrite()
    moved = write.part("UPDATE c SET p = %(to)s WHERE p = %(at)s RETURNING 1", {"to": 3, "at": 1})
    write.expect(moved, 1, "the cursor")
    write.part("INSERT INTO d VALUES (%s, %s)", ("x", "y"))
    rows = write.part("INSERT INTO o SELECT %(n)s RETURNING 1", {"n": 2})
    write.check(f"outbox_written((SELECT count(*) FROM {rows}), %(n)s, 1)", {"n": 2})
    query, params = write.statement()
    assert query == (
        "WITH w0 AS (UPDATE c SET p = %(w0_to)s WHERE p = %(w0_at)s RETURNING 1),"
        " w1 AS (INSERT INTO d VALUES (%(w1_0)s, %(w1_1)s)),"
        " w2 AS (INSERT INTO o SELECT %(w2_n)s RETURNING 1)"
        " SELECT write_expected(%(c0_what)s, (SELECT count(*) FROM w0), %(c0_rows)s),"
        " outbox_written((SELECT count(*) FROM w2), %(c1_n)s, 1)"
    )
    assert params == {
        "w0_to": 3,
        "w0_at": 1,
        "w1_0": "x",
        "w1_1": "y",
        "w2_n": 2,
        "c0_what": "the cursor",
        "c0_rows": 1,
        "c1_n": 2,
    }


def test_parts_naming_a_key_alike_share_one_parameter_while_its_value_is_the_same() -> None:
    write = JoinedWrite()
    write.part(
        "UPDATE c SET p = %(to)s WHERE t = %(t)s AND c = %(c)s", {"t": "a", "c": "k", "to": 2}
    )
    write.part("INSERT INTO d VALUES (%(t)s, %(c)s, %(d)s)", {"t": "a", "c": "k", "d": "d1"})
    # Another tenant under the same name, and a name no key has: each the part's own.
    write.part("INSERT INTO e VALUES (%(t)s, %(c)s, %(x)s)", {"t": "b", "c": "k", "x": 1})
    query, params = write.statement()
    assert query == (
        "WITH w0 AS (UPDATE c SET p = %(w0_to)s WHERE t = %(t)s AND c = %(c)s),"
        " w1 AS (INSERT INTO d VALUES (%(t)s, %(c)s, %(d)s)),"
        " w2 AS (INSERT INTO e VALUES (%(w2_t)s, %(c)s, %(w2_x)s)) SELECT true"
    )
    assert params == {"w0_to": 2, "t": "a", "c": "k", "d": "d1", "w2_t": "b", "w2_x": 1}


def test_a_key_equal_in_value_but_not_in_type_is_not_shared() -> None:
    write = JoinedWrite()
    write.part("INSERT INTO a VALUES (%(e)s)", {"e": 1})
    write.part("INSERT INTO b VALUES (%(e)s)", {"e": 1.0})
    query, params = write.statement()
    assert "%(w1_e)s" in query
    assert params == {"e": 1, "w1_e": 1.0}


def test_only_plain_inserts_are_joined() -> None:
    assert joinable("  INSERT INTO decision VALUES (%s)")
    assert not joinable("UPDATE capture_item SET outcome = %s")
    assert not joinable("WITH x AS (DELETE FROM t RETURNING 1) INSERT INTO u SELECT 1")
    assert written_table("INSERT INTO catalog_item (a) VALUES (1)") == "catalog_item"
    assert written_table("SELECT 1") is None


@pytest.mark.parametrize(
    "query",
    [
        "UPDATE review_case SET revision = 2",
        "SELECT * FROM catalog_item WHERE item_id = %s FOR SHARE",
        "SELECT * FROM capture FOR KEY SHARE",
        "SELECT position FROM stream_cursor for update",
        "SELECT pg_advisory_xact_lock(1)",
        "WITH x AS (SELECT 1) SELECT * FROM x",
    ],
)
def test_a_read_that_needs_the_lock_is_refused(query: str) -> None:
    with pytest.raises(LockNeeded):
        refuse_unlocked_read(query, [])


def test_a_read_of_a_table_the_unit_has_written_is_refused() -> None:
    deferred = [("INSERT INTO decision (decision_id) VALUES (%s)", ("d",))]
    refuse_unlocked_read("SELECT decision_id FROM decision_effect", deferred)
    refuse_unlocked_read("SELECT 1 FROM catalog_item WHERE decision_id = %s", deferred)
    with pytest.raises(LockNeeded, match="decision"):
        refuse_unlocked_read("SELECT 1 FROM decision WHERE decision_id = %s", deferred)


STREAM = StreamId("t1", "c1", 2)


def test_a_read_carries_the_cursor_in_its_own_statement() -> None:
    carried = with_cursor("SELECT a, b FROM x WHERE k = %(k)s", {"k": 1}, STREAM)
    assert carried is not None
    query, params = carried
    assert "LEFT JOIN LATERAL (SELECT true AS present_, q.* FROM (SELECT a, b FROM x" in query
    assert params == {"k": 1, "cursor_t": "t1", "cursor_c": "c1", "cursor_e": 2}
    positional = with_cursor("SELECT a FROM x WHERE k = %s", ("v",), STREAM)
    assert positional is not None and list(positional[1]) == ["v", "t1", "c1", 2]
    assert with_cursor("SELECT a FROM x ORDER BY a", None, STREAM) is None


def test_a_carried_read_separates_the_cursor_from_the_rows() -> None:
    assert cursor_of(STREAM, []) == (None, [])
    assert cursor_of(STREAM, [(7, None, None)]) == (7, [])
    assert cursor_of(STREAM, [(7, None, True, "a", 1), (7, None, True, "b", 2)]) == (
        7,
        [("a", 1), ("b", 2)],
    )
    with pytest.raises(StreamFenced):
        cursor_of(STREAM, [(7, 3, None)])


def test_a_stream_refused_lately_is_contended_until_its_time_runs_out() -> None:
    now = [100.0]
    streams = Contended(seconds=5.0, clock=lambda: now[0])
    assert ("t1", "c1") not in streams
    streams.mark([("t1", "c1")])
    assert ("t1", "c1") in streams and ("t1", "c2") not in streams
    now[0] = 104.9
    assert ("t1", "c1") in streams
    now[0] = 105.1
    assert ("t1", "c1") not in streams
    streams.mark([("t1", "c1"), ("t2", "c1")])
    streams.clear()
    assert ("t1", "c1") not in streams and ("t2", "c1") not in streams
