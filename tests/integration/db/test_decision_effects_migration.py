"""resolver_0005dx gives decisions recorded before it the effect rows their facts
still show, and every existing item the decision behind its current revision."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from alembic import command

from db.migrate import alembic_config
from db.repositories.decisions import for_item
from db.settings import DatabaseSettings
from db.unit_of_work import Transaction
from tests.integration.db.scratch import scratch_database

MAPPED, SPLIT, POLICY, EMPTY = (uuid.uuid4() for _ in range(4))
SPLIT_ID = uuid.uuid4()


@pytest.fixture()
def scratch_dsn(db_settings: DatabaseSettings) -> Iterator[str]:
    """A database of its own, migrated to resolver_0004d, dropped afterwards."""
    with scratch_database(db_settings, "m0005dx", "resolver_0004d") as dsn:
        yield dsn


def _old_state(conn: psycopg.Connection) -> None:
    """Item i1 (revision 1) got listings L1 and L2 from MAPPED, then was split by SPLIT
    into i1-a, which took L1 (mapping revision 2); L2 moved to i2 through a split
    whose rows are not here, so only its current revision is known; POLICY versioned
    a policy; EMPTY changed nothing."""
    for decision in (MAPPED, SPLIT, POLICY, EMPTY):
        conn.execute(
            "INSERT INTO decision (tenant_id, catalog_id, decision_id, action, actor,"
            " actor_kind, rationale, evidence) VALUES ('t', 'c', %s, 'a', 'x', 'human', 'r',"
            ' \'[{"capture_id": "cap", "locator": "$"}]\')',
            (decision,),
        )
    conn.execute(
        "INSERT INTO catalog_item (tenant_id, catalog_id, item_id, class_id, status, title,"
        " revision) VALUES ('t', 'c', 'i1', 'shoe', 'split', 'i1', 2),"
        " ('t', 'c', 'i1-a', 'shoe', 'active', 'a', 1), ('t', 'c', 'i2', 'shoe', 'active', 'b', 3),"
        " ('t', 'c2', 'j1', 'lamp', 'active', 'j', 1), ('t', 'c2', 'j2', 'lamp', 'retired', 'k', 2)"
    )
    conn.execute(
        "INSERT INTO listing_mapping (tenant_id, catalog_id, listing_id, item_id,"
        " item_revision, decision_id, revision) VALUES ('t', 'c', 'L1', 'i1-a', 1, %s, 2),"
        " ('t', 'c', 'L2', 'i2', 3, %s, 2)",
        (SPLIT, MAPPED),
    )
    conn.execute(
        "INSERT INTO item_split (tenant_id, catalog_id, split_id, source_item_id,"
        " source_revision, decision_id) VALUES ('t', 'c', %s, 'i1', 2, %s)",
        (SPLIT_ID, SPLIT),
    )
    conn.execute("INSERT INTO item_split_successor VALUES ('t', 'c', %s, 'i1-a')", (SPLIT_ID,))
    conn.execute("INSERT INTO item_split_remap VALUES ('t', 'c', %s, 'L1', 'i1-a', 2)", (SPLIT_ID,))
    conn.execute(
        "INSERT INTO shipping_policy_version (tenant_id, catalog_id, policy_id, version, scope,"
        " effective_from, decision_id) VALUES ('t', 'c', 'std', 1, 'DE', now(), %s)",
        (POLICY,),
    )


def test_effects_are_rebuilt_from_the_facts(scratch_dsn: str) -> None:
    with psycopg.connect(scratch_dsn) as conn:
        _old_state(conn)
    command.upgrade(alembic_config("resolver", scratch_dsn), "resolver_0005dx")
    with psycopg.connect(scratch_dsn) as conn:
        rows = conn.execute(
            "SELECT decision_id, role, aggregate_type, aggregate_id, revision FROM decision_effect"
        ).fetchall()
    assert sorted(rows) == sorted(
        [
            *((d, "changed", "decision", str(d), 1) for d in (MAPPED, SPLIT, POLICY, EMPTY)),
            (SPLIT, "changed", "item_split", str(SPLIT_ID), 1),
            (SPLIT, "changed", "catalog_item", "i1", 2),
            (SPLIT, "changed", "catalog_item", "i1-a", 1),
            # Once, though both the mapping and the remap row name it; the successor
            # it rests on is a revision the split itself made, so not 'relied_on'.
            (SPLIT, "changed", "listing_mapping", "L1", 2),
            (MAPPED, "changed", "listing_mapping", "L2", 2),
            (MAPPED, "relied_on", "catalog_item", "i2", 3),
            (POLICY, "changed", "shipping_policy", "std", 1),
        ]
    )


def test_every_item_names_the_split_that_wrote_it_or_an_import_decision(
    scratch_dsn: str,
) -> None:
    with psycopg.connect(scratch_dsn) as conn:
        _old_state(conn)
    command.upgrade(alembic_config("resolver", scratch_dsn), "resolver_0005dx")
    with psycopg.connect(scratch_dsn) as conn:
        items = dict(
            conn.execute(
                "SELECT catalog_id || '/' || item_id, decision_id FROM catalog_item"
            ).fetchall()
        )
        imports = conn.execute(
            "SELECT catalog_id, decision_id, action, actor_kind, evidence, case_id FROM decision"
            " WHERE actor = 'migration:resolver_0005dx' ORDER BY catalog_id"
        ).fetchall()
        imported_effects = conn.execute(
            "SELECT count(*) FROM decision_effect WHERE decision_id = ANY(%s)",
            ([i[1] for i in imports],),
        ).fetchone()
        nullable = conn.execute(
            "SELECT is_nullable FROM information_schema.columns"
            " WHERE table_name = 'catalog_item' AND column_name = 'decision_id'"
        ).fetchone()
    # One import decision per tenant and catalog holding unattributed items.
    assert [(c, a, k, e, case) for c, _, a, k, e, case in imports] == [
        (
            catalog,
            "import",
            "rule",
            [{"capture_id": "migration:resolver_0005dx", "locator": "catalog_item"}],
            None,
        )
        for catalog in ("c", "c2")
    ]
    by_catalog = {c: d for c, d, *_ in imports}
    assert items == {
        "c/i1": SPLIT,  # the split wrote its current revision (2)
        "c/i1-a": SPLIT,  # a successor, still at the revision the split created
        "c/i2": by_catalog["c"],
        "c2/j1": by_catalog["c2"],
        "c2/j2": by_catalog["c2"],
    }
    assert imported_effects == (0,)  # the imports produced no events
    assert nullable == ("NO",)
    # An imported item's history names its import decision; a split successor's, the
    # split (through its effect rows and its decision column alike).
    with psycopg.connect(scratch_dsn) as conn:
        tx = Transaction(conn)
        # (L2 rests on i2's revision 3, so its mapping decision is there too.)
        i2 = [d.decision_id for d in for_item(tx, "t", "c", "i2")]
        assert i2 == [MAPPED, by_catalog["c"]]
        assert [d.decision_id for d in for_item(tx, "t", "c", "i1-a")] == [SPLIT]

    command.downgrade(alembic_config("resolver", scratch_dsn), "resolver_0004d")
    with psycopg.connect(scratch_dsn) as conn:
        assert conn.execute("SELECT to_regclass('decision_effect')").fetchone() == (None,)
        column = conn.execute(
            "SELECT count(*) FROM information_schema.columns"
            " WHERE table_name = 'catalog_item' AND column_name = 'decision_id'"
        ).fetchone()
        assert column == (0,)
        # Decisions are never deleted, the import decisions included.
        assert conn.execute("SELECT count(*) FROM decision").fetchone() == (6,)
