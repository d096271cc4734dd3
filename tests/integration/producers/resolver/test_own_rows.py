"""Rows a transaction wrote, answered without reading them back (``db.own_rows``),
against real PostgreSQL: what the write path reads from them is what the database
holds in that transaction, and it sends no statement for it."""

from __future__ import annotations

import psycopg
import psycopg.errors
import pytest

from db.repositories import catalog_items as items
from db.repositories import listing_mappings as mappings
from db.repositories import strong_ids as strong
from db.settings import DatabaseSettings
from producers.resolver.catalog_items import ItemChange
from producers.resolver.decisions import commit_staged, stage_decision
from producers.resolver.listing_mappings import MapListing
from tests.fixtures.decisions import by_rule
from tests.integration.producers.resolver.conftest import UowFactory, add_item

T, C = "t1", "c1"


def change(item_id: str, title: str) -> ItemChange:
    return ItemChange(T, C, item_id, "shoe", title, attributes={"colour": "red"})


def test_items_written_in_the_transaction_are_read_as_the_database_holds_them(
    uow: UowFactory, statements: list[str]
) -> None:
    add_item(uow, "old")  # exists before: read from the database
    with uow() as u:
        stage_decision(u, by_rule(T, C, change("new", "first")))  # inserted
        stage_decision(u, by_rule(T, C, change("new", "second"), change("old", "again")))
        statements.clear()
        own = items.get_many_for_share(u.tx, T, C, ["new", "old"])
        assert own["new"] == items.get_for_share(u.tx, T, C, "new")
        assert [s for s in statements if "FOR SHARE" in s] == []  # both were written here
        # What the database holds in this transaction, read without the own rows.
        for item_id in ("new", "old"):
            assert own[item_id] == items.get(u.tx, T, C, item_id)
        assert (own["new"].revision, own["old"].revision) == (2, 2)
        commit_staged(u)


def test_a_listing_mapped_to_an_item_of_the_same_transaction_reads_nothing_back(
    uow: UowFactory, statements: list[str]
) -> None:
    add_item(uow, "warm-up")  # the stream's cursor row and epoch exist from here on
    with uow() as u:
        stage_decision(u, by_rule(T, C, change("i1", "lamp"), MapListing("L1", "i1")))
        assert [s for s in statements if "FOR SHARE" in s] == []
        commit_staged(u)
    with uow() as u:
        row = u.tx.execute(
            "SELECT item_id, item_revision FROM listing_mapping"
            " WHERE tenant_id = %s AND catalog_id = %s AND listing_id = 'L1'",
            (T, C),
        ).fetchone()
    assert row == ("i1", 1)


def test_strong_ids_of_an_item_inserted_in_the_transaction_are_its_own(
    uow: UowFactory, statements: list[str]
) -> None:
    add_item(uow, "warm-up")
    with uow() as u:
        stage_decision(u, by_rule(T, C, change("i2", "mug")))
        strong.insert_strong_ids(u.tx, T, C, [("i2", "gtin", "1"), ("i2", "mpn", "m")])
        strong.insert_strong_ids(u.tx, T, C, [("i2", "gtin", "2")])  # the first value stays
        statements.clear()
        own = strong.strong_ids(u.tx, T, C, "i2")
        assert statements == []
        in_database = u.tx.execute(
            "SELECT scheme, value FROM identity_strong_id"
            " WHERE tenant_id = %s AND catalog_id = %s AND item_id = 'i2'",
            (T, C),
        ).fetchall()
        assert own == dict(in_database) == {"gtin": "1", "mpn": "m"}
        # An item from before is read from the database.
        assert strong.strong_ids(u.tx, T, C, "warm-up") == {}
        assert len(statements) == 2


def test_rows_found_absent_under_the_cursor_lock_are_inserted_without_a_second_look(
    uow: UowFactory, statements: list[str]
) -> None:
    add_item(uow, "warm-up")
    with uow() as u:
        u.stream(T, C)  # the cursor lock, as the capture worker's read-ahead holds it
        assert items.get_many(u.tx, T, C, ["n1"], cursor_locked=True) == {}
        assert mappings.get_many(u.tx, T, C, ["L2"], cursor_locked=True) == {}
        statements.clear()
        stage_decision(u, by_rule(T, C, change("n1", "vase"), MapListing("L2", "n1")))
        assert statements == []  # no state read, no upsert: every write is deferred
        commit_staged(u)
    with uow() as u:
        assert items.get(u.tx, T, C, "n1") == items.ItemRow(
            "n1", "shoe", "active", "vase", None, {"colour": "red"}, 1
        )
        row = mappings.get(u.tx, T, C, "L2")
        assert row is not None and (row.item_id, row.item_revision, row.revision) == ("n1", 1, 1)


def test_a_row_that_appears_after_all_is_refused_and_nothing_commits(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    decided = add_item(uow, "warm-up")
    with uow() as u:
        u.stream(T, C)
        assert items.get_many(u.tx, T, C, ["n2"], cursor_locked=True) == {}
        # A writer that did not take the cursor lock creates it meanwhile.
        with psycopg.connect(clean_db.resolver_owner_dsn) as other:
            other.execute(
                "INSERT INTO catalog_item (tenant_id, catalog_id, item_id, class_id, status,"
                " title, attributes, revision, decision_id) VALUES (%s, %s, 'n2', 'shoe',"
                " 'active', 'x', '{}', 1, %s)",
                (T, C, decided),
            )
        stage_decision(u, by_rule(T, C, change("n2", "vase")))
        with pytest.raises(psycopg.errors.UniqueViolation):
            commit_staged(u)
    with uow() as u:
        assert items.get(u.tx, T, C, "n2") == items.ItemRow(
            "n2", "shoe", "active", "x", None, {}, 1
        )
        decisions = u.tx.execute("SELECT count(*) FROM decision").fetchone()
    assert decisions == (1,)  # the warm-up's only
