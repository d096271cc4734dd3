"""resolver_0002 turns per-row ``published_at`` marks into published positions and back."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from alembic import command

from db.migrate import alembic_config
from db.settings import DatabaseSettings
from tests.integration.db.scratch import scratch_database

# Streams of the old schema: (catalog, cursor, positions marked published).
OLD_STREAMS = [
    ("partly", 5, {1, 2, 3}),
    ("all", 3, {1, 2, 3}),
    ("none", 4, set()),
    ("marked-out-of-order", 4, {1, 3}),  # the old relay never did this; still no loss
    ("no-rows", 0, set()),
]


@pytest.fixture()
def scratch_dsn(db_settings: DatabaseSettings) -> Iterator[str]:
    """A database of its own, migrated to resolver_0001, dropped afterwards."""
    with scratch_database(db_settings, "m0002", "resolver_0001") as dsn:
        yield dsn


def test_upgrade_keeps_what_was_published_and_downgrade_restores_the_marks(
    scratch_dsn: str,
) -> None:
    with psycopg.connect(scratch_dsn) as conn:
        for catalog, cursor, published in OLD_STREAMS:
            conn.execute(
                "INSERT INTO stream_cursor (tenant_id, catalog_id, history_epoch, position)"
                " VALUES ('t', %s, 1, %s)",
                (catalog, cursor),
            )
            for position in range(1, cursor + 1):
                conn.execute(
                    "INSERT INTO outbox (tenant_id, catalog_id, history_epoch, position,"
                    " event_id, event_type, key, value, headers, published_at)"
                    " VALUES ('t', %s, 1, %s, gen_random_uuid(), 'x', 'k', 'v', '{}',"
                    " CASE WHEN %s THEN now() END)",
                    (catalog, position, position in published),
                )

    command.upgrade(alembic_config("resolver", scratch_dsn), "resolver_0002")
    with psycopg.connect(scratch_dsn) as conn:
        positions = dict(
            conn.execute("SELECT catalog_id, published_position FROM stream_publication")
        )
    # Below the first unpublished row, or the cursor when there is none: nothing Kafka
    # already has is sent again, and nothing unpublished is skipped.
    assert positions == {
        "partly": 3,
        "all": 3,
        "none": 0,
        "marked-out-of-order": 1,
        "no-rows": 0,
    }

    command.downgrade(alembic_config("resolver", scratch_dsn), "resolver_0001")
    with psycopg.connect(scratch_dsn) as conn:
        rows = conn.execute(
            "SELECT catalog_id, position, published_at IS NOT NULL,"
            " headers = jsonb_build_object('event_id', event_id::text, 'history_epoch', '1')"
            " FROM outbox"
        ).fetchall()
    assert {(c, p) for c, p, marked, _ in rows if marked} == {
        (catalog, position)
        for catalog, _, _ in OLD_STREAMS
        for position in range(1, positions[catalog] + 1)
    }
    assert all(headers_rebuilt for *_, headers_rebuilt in rows)
