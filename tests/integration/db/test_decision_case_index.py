"""resolver_0013dc: the foreign-key checks against ``decision`` go by its primary key
however young the table's statistics are (the case index, partial now, cannot serve
them), and the migration moves an existing database from the old index to the new."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from alembic import command

from db.migrate import alembic_config
from db.settings import DatabaseSettings
from tests.integration.db.scratch import scratch_database

# The statement PostgreSQL runs for each foreign-key check against ``decision``.
RI_CHECK = (
    'SELECT 1 FROM ONLY "public"."decision" x WHERE "tenant_id" OPERATOR(pg_catalog.=) $1'
    ' AND "catalog_id" OPERATOR(pg_catalog.=) $2 AND "decision_id" OPERATOR(pg_catalog.=) $3'
    " FOR KEY SHARE OF x"
)


@pytest.fixture()
def scratch_dsn(db_settings: DatabaseSettings) -> Iterator[str]:
    with scratch_database(db_settings, "m0013dc") as dsn:
        yield dsn


def _decisions(conn: psycopg.Connection, n: int, case: str | None = None) -> None:
    """``n`` rule decisions of one stream (or of ``case``, revision 1), never analyzed."""
    if case is not None:
        conn.execute(
            "INSERT INTO review_case (tenant_id, catalog_id, case_id, subject_type,"
            " subject_id, status, revision) VALUES ('t', 'c', %s, 'catalog_item', 'i1',"
            " 'open', 1) ON CONFLICT DO NOTHING",
            (case,),
        )
    for _ in range(n):
        conn.execute(
            "INSERT INTO decision (tenant_id, catalog_id, decision_id, action, actor,"
            " actor_kind, rationale, evidence, case_id, case_revision)"
            " VALUES ('t', 'c', %s, 'create', 'rule:test', 'rule', 'test',"
            """ '[{"capture_id": "cap", "locator": "$"}]', %s, %s)""",
            (uuid.uuid4(), case, None if case is None else 1),
        )


def _check_plan(conn: psycopg.Connection) -> str:
    """The generic plan a connection keeps for the check (as the cached one is)."""
    conn.execute("SET plan_cache_mode = force_generic_plan")
    conn.execute(f"PREPARE ri_check(text, text, uuid) AS {RI_CHECK}")
    rows = conn.execute("EXPLAIN EXECUTE ri_check('t', 'c', gen_random_uuid())").fetchall()
    return "\n".join(r[0] for r in rows)


def test_the_check_goes_by_the_primary_key_on_a_young_table(scratch_dsn: str) -> None:
    command.upgrade(alembic_config("resolver", scratch_dsn), "heads")
    with psycopg.connect(scratch_dsn, autocommit=True) as conn:
        _decisions(conn, 30)
        plan = _check_plan(conn)
    assert "decision_pkey" in plan, plan


def test_before_it_the_case_index_was_taken_for_the_check(scratch_dsn: str) -> None:
    """What the migration is for: the same table and rows under the old index."""
    command.upgrade(alembic_config("resolver", scratch_dsn), "resolver_0012ow")
    with psycopg.connect(scratch_dsn, autocommit=True) as conn:
        _decisions(conn, 30)
        plan = _check_plan(conn)
    assert "decision_case_idx" in plan, plan


def test_the_migration_replaces_the_index_and_keeps_the_case_lookups(scratch_dsn: str) -> None:
    config = alembic_config("resolver", scratch_dsn)
    command.upgrade(config, "resolver_0012ow")
    with psycopg.connect(scratch_dsn, autocommit=True) as conn:
        _decisions(conn, 5)
        _decisions(conn, 2, case="case-1")
    command.upgrade(config, "heads")
    with psycopg.connect(scratch_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pg_get_indexdef('decision_case_idx'::regclass),"
            " (SELECT count(*) FROM pg_class WHERE relname = 'decision_case_partial_idx')"
        ).fetchone()
        assert row is not None
        assert row[0].endswith("WHERE (case_id IS NOT NULL)"), row[0]
        assert row[1] == 0
        conn.execute("SET enable_seqscan = off")
        plan = conn.execute(
            "EXPLAIN SELECT decision_id FROM decision"
            " WHERE tenant_id = 't' AND catalog_id = 'c' AND case_id = 'case-1'"
        ).fetchall()
        assert "decision_case_idx" in "\n".join(r[0] for r in plan)
    command.downgrade(config, "resolver_0012ow")
    with psycopg.connect(scratch_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_get_indexdef('decision_case_idx'::regclass)").fetchone()
        assert row is not None and "WHERE" not in row[0]
