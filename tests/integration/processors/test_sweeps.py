"""The agents' sweeps of the product and control databases, against real PostgreSQL:
each deletes what is past its retention and keeps what is not (finished rebuilds
but the newest done one and the one naming the highest generation, control
answers, resolved quarantine entries but a skipped one naming its aggregate, gone
processes with their pause acknowledgements), a bounded batch at a time."""

from __future__ import annotations

import uuid
from datetime import timedelta

import psycopg
import pytest

from db import batched_delete
from db.product import rebuilds
from db.settings import DatabaseSettings
from processors.sweeps import SweepPolicy, sweep_once
from schemas.ids import StreamId

DAY = 86_400.0
POLICY = SweepPolicy(
    rebuild_seconds=30 * DAY, quarantine_seconds=30 * DAY, process_seconds=7 * DAY, batch=2
)
CONSUMER = "product-applier"


def _rebuild(
    conn: psycopg.Connection,
    phase: str,
    days_ago: float,
    generation: int,
    *,
    catalog: str = "c1",
    cleaned: bool = True,
) -> uuid.UUID:
    rebuild_id = uuid.uuid4()
    rebuilds.insert(
        conn, rebuild_id, CONSUMER, StreamId("t", catalog, 1), f"shadow-{rebuild_id}", "me", ""
    )
    rebuilds.update(conn, rebuild_id, phase, error_code="X" if phase == "failed" else None)
    conn.execute(
        "UPDATE rebuild SET finished_at = clock_timestamp() - %s, generation = %s,"
        " cleaned_at = CASE WHEN %s THEN clock_timestamp() END WHERE rebuild_id = %s",
        (timedelta(days=days_ago), generation, cleaned, rebuild_id),
    )
    return rebuild_id


def _answer(conn: psycopg.Connection, days_ago: float) -> uuid.UUID:
    command_id = uuid.uuid4()
    rebuilds.record_answer(conn, command_id, "already_rebuilding", "busy", None)
    conn.execute(
        "UPDATE control_answer SET answered_at = clock_timestamp() - %s WHERE command_id = %s",
        (timedelta(days=days_ago), command_id),
    )
    return command_id


_offsets = iter(range(1_000_000))


def _entry(
    conn: psycopg.Connection, status: str, days_ago: float, aggregate: str | None = None
) -> int:
    row = conn.execute(
        'INSERT INTO quarantine (consumer, topic, partition, "offset", error_code,'
        " error_detail, status, resolved_at, aggregate_type, aggregate_id, revision)"
        " VALUES (%s, 't', 0, %s, 'E', 'd', %s,"
        " CASE WHEN %s <> 'open' THEN clock_timestamp() - %s END, %s, %s, %s) RETURNING id",
        (
            CONSUMER,
            next(_offsets),
            status,
            status,
            timedelta(days=days_ago),
            aggregate,
            aggregate and "i1",
            aggregate and 3,
        ),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _ids(conn: psycopg.Connection, sql: str) -> set[object]:
    return {r[0] for r in conn.execute(sql).fetchall()}


def test_the_product_sweep_keeps_what_is_not_past_retention(clean_db: DatabaseSettings) -> None:
    with psycopg.connect(clean_db.product_dsn, autocommit=True) as conn:
        _rebuild(conn, "failed", 40, generation=2)  # goes
        _rebuild(conn, "done", 40, generation=3)  # goes: a later one is done
        newest_done = _rebuild(conn, "done", 35, generation=4)
        not_cleaned = _rebuild(conn, "cancelled", 40, generation=5, cleaned=False)
        failed_lately = _rebuild(conn, "failed", 1, generation=6)
        highest_generation = _rebuild(conn, "cancelled", 40, generation=7)
        other_catalog_done = _rebuild(conn, "done", 40, generation=2, catalog="c2")
        _answer(conn, 40)  # goes
        new_answer = _answer(conn, 1)
        entries = {
            "open": _entry(conn, "open", 40),
            "retried": _entry(conn, "retried", 40),
            "superseded": _entry(conn, "superseded", 40),
            "skipped": _entry(conn, "skipped", 40),
            "skipped_aggregate": _entry(conn, "skipped", 40, aggregate="catalog_item"),
            "retried_lately": _entry(conn, "retried", 1),
        }

        swept = sweep_once(clean_db.product_dsn, clean_db.control_dsn, POLICY)

        assert (swept["rebuild"], swept["control_answer"], swept["quarantine"]) == (2, 1, 3)
        assert _ids(conn, "SELECT rebuild_id FROM rebuild") == {
            newest_done,
            not_cleaned,
            failed_lately,
            highest_generation,
            other_catalog_done,
        }
        assert _ids(conn, "SELECT command_id FROM control_answer") == {new_answer}
        assert _ids(conn, "SELECT id FROM quarantine") == {
            entries["open"],
            entries["skipped_aggregate"],
            entries["retried_lately"],
        }


def test_resolved_entries_go_a_bounded_batch_at_a_time(
    clean_db: DatabaseSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batched_delete, "MAX_BATCHES", 2)
    with psycopg.connect(clean_db.product_dsn, autocommit=True) as conn:
        for _ in range(5):
            _entry(conn, "retried", 40)
        first = sweep_once(clean_db.product_dsn, clean_db.control_dsn, POLICY)
        assert first["quarantine"] == 4  # two statements of two rows
        second = sweep_once(clean_db.product_dsn, clean_db.control_dsn, POLICY)
        assert second["quarantine"] == 1
        assert _ids(conn, "SELECT id FROM quarantine") == set()


def test_the_control_sweep_deletes_gone_processes_and_old_acknowledgements(
    clean_db: DatabaseSettings,
) -> None:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as conn:
        open_pause, old_pause = uuid.uuid4(), uuid.uuid4()
        conn.execute(
            "INSERT INTO stream_pause (pause_id, tenant_id, catalog_id, paused_by, reason,"
            " paused_at, resumed_at) VALUES (%s, 't', 'c1', 'me', 'r', now(), NULL),"
            " (%s, 't', 'c2', 'me', 'r', now() - interval '20 days',"
            " now() - interval '10 days')",
            (open_pause, old_pause),
        )
        conn.execute(
            "INSERT INTO process_instance (instance_id, role, seen_at) VALUES"
            " ('gone', 'agents', now() - interval '10 days'), ('live', 'agents', now()),"
            " ('gone-unacked', 'relay', now() - interval '8 days'),"
            " ('lately', 'relay', now() - interval '1 day')"
        )
        conn.execute(
            "INSERT INTO pause_ack (pause_id, instance_id, state, role) VALUES"
            " (%(o)s, 'gone', 'paused', 'agents'), (%(o)s, 'live', 'paused', 'agents'),"
            " (%(p)s, 'live', 'paused', 'agents'), (%(p)s, 'live', 'resumed', 'agents'),"
            " (%(o)s, 'lately', 'paused', 'relay')",
            {"o": open_pause, "p": old_pause},
        )

        swept = sweep_once(clean_db.product_dsn, clean_db.control_dsn, POLICY)

        assert swept["process"] == 5  # 1 + 2 acknowledgements, 2 processes
        assert _ids(conn, "SELECT instance_id FROM process_instance") == {"live", "lately"}
        acks = conn.execute("SELECT pause_id, instance_id FROM pause_ack ORDER BY 2").fetchall()
        assert acks == [(open_pause, "lately"), (open_pause, "live")]
