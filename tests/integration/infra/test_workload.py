"""The demo's workload against a real resolver: its attribute decisions keep items'
classes and values compatible, and its deliberate refusals are the only attribute
refusals it meets."""

from __future__ import annotations

import psycopg
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.settings import DatabaseSettings
from infra.demo.taxonomy import DEFINITIONS
from infra.demo.workload import run_workload, streams_for

ATTRIBUTE_CODES = ("ATTRIBUTE_NOT_PUBLISHED", "ATTRIBUTE_VALUE_INVALID", "ATTRIBUTE_NOT_APPLICABLE")


def test_workload_sets_attribute_values_and_meets_only_the_refusals_it_aims_at(
    clean_db: DatabaseSettings,
) -> None:
    streams = streams_for("wl", tenants=1)
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=4, max_size=4, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    try:
        stats = run_workload(pool, epochs, streams, events=1500, writers=4)
    finally:
        pool.close()
        epochs.close()

    with psycopg.connect(clean_db.resolver_owner_dsn) as conn:
        committed = conn.execute("SELECT count(*) FROM outbox").fetchone()
        definitions = conn.execute(
            "SELECT status, count(*) FROM attribute_definition GROUP BY status"
        ).fetchall()
        keys = conn.execute("SELECT DISTINCT attribute_key FROM attribute_value").fetchall()
        changed = conn.execute("SELECT count(*) FROM attribute_value WHERE revision > 1")
        # Values on items whose class the definition reaches only through an ancestor.
        inherited = conn.execute(
            "SELECT count(*) FROM attribute_value v JOIN catalog_item i"
            " USING (tenant_id, catalog_id, item_id) WHERE NOT EXISTS (SELECT 1"
            "  FROM attribute_applicability a WHERE a.tenant_id = v.tenant_id"
            "  AND a.catalog_id = v.catalog_id AND a.attribute_key = v.attribute_key"
            "  AND a.version = v.definition_version AND a.class_id = i.class_id)"
        ).fetchone()
        changed_count = changed.fetchone()
    assert committed == (stats.events,)
    assert stats.events >= 1500

    # Each catalog defined its schema once and published its draft once, later.
    assert stats.decisions["attribute_schema"] == len(streams)
    assert stats.decisions["attribute_publish"] == len(streams)
    assert definitions == [("published", len(streams) * len(DEFINITIONS))]
    assert {k for (k,) in keys} == set(DEFINITIONS)
    assert changed_count is not None and changed_count[0] > 0
    assert inherited is not None and inherited[0] > 0

    # Every attribute refusal was a deliberate attempt aimed at that very code: no item
    # update was refused for stranding a value, no ordinary value was refused. (An
    # attempt can miss its code: its item retired, or the draft published meanwhile.)
    assert sum(stats.rejected_by_code[code] for code in ATTRIBUTE_CODES) > 0
    for code in ATTRIBUTE_CODES:
        assert stats.rejected_by_code[code] <= stats.refusals_attempted[code], (
            code,
            stats.rejected_by_code,
            stats.refusals_attempted,
        )
