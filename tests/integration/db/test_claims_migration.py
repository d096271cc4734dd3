"""resolver_0016cl moves a result's claims from ``capture_claim`` rows into its own
row's ``claims`` column, and back on downgrade."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from alembic import command

from db.migrate import alembic_config
from db.settings import DatabaseSettings
from tests.integration.db.scratch import scratch_database

CAPTURE = uuid.uuid4()
# source item -> its claims (field, value, locator); "none" settled without any.
CLAIMS = {
    "a": [("title", "A lamp", "$.items[0]"), ("offer.price", "9.90", "$.items[0].price")],
    "b": [("class_id", "boot", "$.items[1]")],
    "none": [],
}


@pytest.fixture()
def scratch_dsn(db_settings: DatabaseSettings) -> Iterator[str]:
    """A database of its own, migrated to resolver_0015ob, dropped afterwards."""
    with scratch_database(db_settings, "m0016", "resolver_0015ob") as dsn:
        yield dsn


def _claims(conn: psycopg.Connection) -> set[tuple[str, str, str, str]]:
    rows = conn.execute(
        "SELECT source_item_id, field, value, locator FROM capture_claim"
        " WHERE tenant_id = 't' AND capture_id = %s AND parser_version = 1",
        (CAPTURE,),
    ).fetchall()
    return {tuple(r) for r in rows}


def test_upgrade_moves_every_claim_into_its_result_and_downgrade_brings_them_back(
    scratch_dsn: str,
) -> None:
    expected = {(s, *c) for s, claims in CLAIMS.items() for c in claims}
    with psycopg.connect(scratch_dsn) as conn:
        # Results without their capture and job: only the claims are under test.
        conn.execute("SET session_replication_role = replica")
        for n, (source_item, claims) in enumerate(CLAIMS.items()):
            conn.execute(
                "INSERT INTO capture_item (tenant_id, capture_id, source_item_id,"
                " parser_version, job_id, source, catalog_id, adapter, item_index,"
                " schema_version, fingerprint, locator, outcome)"
                " VALUES ('t', %s, %s, 1, %s, 'shop', 'c1', 'json-feed', %s, 1, 'f', %s,"
                " 'applied')",
                (CAPTURE, source_item, uuid.uuid4(), n, f"$.items[{n}]"),
            )
            for field, value, locator in claims:
                conn.execute(
                    "INSERT INTO capture_claim (tenant_id, capture_id, source_item_id,"
                    " parser_version, field, value, locator) VALUES ('t', %s, %s, 1, %s, %s, %s)",
                    (CAPTURE, source_item, field, value, locator),
                )
        assert _claims(conn) == expected

    command.upgrade(alembic_config("resolver", scratch_dsn), "resolver_0016cl")
    with psycopg.connect(scratch_dsn) as conn:
        columns = dict(conn.execute("SELECT source_item_id, claims FROM capture_item").fetchall())
        gone = conn.execute("SELECT to_regclass('capture_claim')").fetchone()
    assert columns == {
        "a": {"title": ["A lamp", "$.items[0]"], "offer.price": ["9.90", "$.items[0].price"]},
        "b": {"class_id": ["boot", "$.items[1]"]},
        "none": None,
    }
    assert gone == (None,)

    command.downgrade(alembic_config("resolver", scratch_dsn), "resolver_0015ob")
    with psycopg.connect(scratch_dsn) as conn:
        assert _claims(conn) == expected
