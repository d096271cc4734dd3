"""Facts accepted together (one statement per step for a run of items, retirements or
listing mappings) against real PostgreSQL: the same rows, events and first error as
accepting them one by one, and a statement count that does not grow with the facts."""

from __future__ import annotations

import dataclasses
import itertools
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import pq
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from db.unlocked import doubted, known_cursors
from producers.resolver.attributes.facts import DefineAttribute, DefineClass, SetAttributeValue
from producers.resolver.catalog_items import ItemChange, RetireItem
from producers.resolver.decisions import Decision, record_decision
from producers.resolver.exceptions import DomainError
from producers.resolver.facts import DecisionScope, Fact
from producers.resolver.listing_mappings import MapListing
from producers.resolver.splits import SplitItem, Successor
from schemas.codec import CODEC
from tests.integration.producers.resolver.conftest import EVIDENCE, UowFactory

TENANT = "t1"
SPLIT = uuid.uuid4()


@dataclass(frozen=True)
class OneByOne:
    """Hides a fact's set-based type, so ``record_decision`` accepts it on its own."""

    fact: Fact

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        self.fact.accept(uow, scope)


Step = Callable[[str], Sequence[Fact]]
"""A decision's facts, for a catalog."""


def record(uow: UowFactory, catalog: str, facts: Sequence[Fact], one_by_one: bool) -> None:
    chosen = tuple(OneByOne(f) for f in facts) if one_by_one else tuple(facts)
    decision = Decision(
        TENANT, catalog, "accept", "rule:test", "test", EVIDENCE, chosen, actor_kind="rule"
    )
    with uow() as u:
        record_decision(u, decision)


def item(catalog: str, item_id: str, title: str = "", parent: str | None = None) -> ItemChange:
    attributes = {"colour": "red"} if item_id.endswith("2") else {}
    return ItemChange(
        TENANT, catalog, item_id, "shoe", title or f"item {item_id}", parent, attributes
    )


def setup_steps() -> list[Step]:
    return [
        # New items, a child of one of them (its own run), mappings onto them.
        lambda c: [
            *(item(c, f"i{k}") for k in range(12)),
            item(c, "child", parent="i0"),
            *(MapListing(f"L{k}", f"i{k}") for k in range(6)),
        ],
        # Changes (one under a parent) with a new item among them, retirements, remaps
        # and new mappings.
        lambda c: [
            *(item(c, f"i{k}", title=f"renamed {k}") for k in range(3)),
            item(c, "fresh"),
            *(item(c, f"i{k}", title=f"renamed {k}") for k in range(3, 5)),
            item(c, "i5", parent="i1"),
            RetireItem("i8", "discontinued"),
            RetireItem("i9", "discontinued"),
            MapListing("L0", "i1"),
            MapListing("L6", "i7"),
            MapListing("L7", "i7"),
        ],
        lambda c: [
            SplitItem("i10", (Successor("i10-a", "a"), Successor("i10-b", "b")), split_id=SPLIT)
        ],
        # The same item twice in one decision, and a parent written after its child read it.
        lambda c: [item(c, "i3", "again"), item(c, "i3", "and again"), item(c, "i4", parent="i6")],
        lambda c: [
            DefineClass("shoe"),
            DefineClass("boot"),
            DefineAttribute("colour", 1, "Colour", "text", ("shoe",), publish=True),
            DefineAttribute("size", 1, "Size", "number", ("shoe",), publish=True),
            DefineAttribute("draft", 1, "Draft", "text", ("shoe",)),
        ],
        # Values of several items and keys, one key set twice for one item (its own run).
        lambda c: [
            *(SetAttributeValue(f"i{k}", "colour", 1, f"c{k}") for k in range(4)),
            *(SetAttributeValue(f"i{k}", "size", 1, 40 + k) for k in range(3)),
            SetAttributeValue("i0", "colour", 1, "again"),
        ],
    ]


REFUSED: list[Step] = [
    # A child of a retired item (the third), and of a missing one (the fifth): the first.
    lambda c: [
        item(c, "n1"),
        item(c, "n2"),
        item(c, "n3", parent="i8"),
        item(c, "n4"),
        item(c, "n5", parent="nope"),
    ],
    # A split item among new ones, before another refusal.
    lambda c: [item(c, "n1"), item(c, "i10"), item(c, "n3", parent="nope")],
    lambda c: [RetireItem("i1", "x"), RetireItem("missing", "x"), RetireItem("i10", "x")],
    lambda c: [RetireItem("i1", "x"), RetireItem("i10", "x")],
    lambda c: [MapListing("L1", "i2"), MapListing("L9", "i9"), MapListing("L8", "nope")],
    # An item of another catalog in the middle of a run.
    lambda c: [item(c, "n1"), item("elsewhere", "n2"), item(c, "n3", parent="nope")],
    # A class change that would strand a value, after a harmless one.
    lambda c: [item(c, "i5"), ItemChange(TENANT, c, "i1", "boot", "a boot")],
    # Values: a draft definition, a retired item, a missing one, a bad number.
    lambda c: [
        SetAttributeValue("i2", "colour", 1, "red"),
        SetAttributeValue("i2", "draft", 1, "x"),
        SetAttributeValue("i8", "colour", 1, "x"),
    ],
    lambda c: [SetAttributeValue("i2", "colour", 1, "red"), SetAttributeValue("i8", "size", 1, 1)],
    lambda c: [SetAttributeValue("i2", "size", 1, "big"), SetAttributeValue("nope", "size", 1, 1)],
    lambda c: [SetAttributeValue("i2", "size", 2, 1)],
]


def state(dsn: str, catalog: str) -> dict[str, Any]:
    """Every row and event the decisions wrote in ``catalog``, each as its text with
    decision ids replaced by their order (each catalog's decisions have their own)."""
    where = "WHERE tenant_id = %s AND catalog_id = %s"
    key = (TENANT, catalog)
    with psycopg.connect(dsn) as conn:
        items = conn.execute(
            "SELECT item_id, class_id, status, title, parent_item_id, attributes, revision"
            f" FROM catalog_item {where} ORDER BY item_id",
            key,
        ).fetchall()
        attribute_values = conn.execute(
            "SELECT item_id, attribute_key, definition_version, value, item_revision, revision"
            f" FROM attribute_value {where} ORDER BY item_id, attribute_key",
            key,
        ).fetchall()
        mappings = conn.execute(
            "SELECT listing_id, item_id, item_revision, revision"
            f" FROM listing_mapping {where} ORDER BY listing_id",
            key,
        ).fetchall()
        effects = conn.execute(
            "SELECT aggregate_type, aggregate_id, revision, role"
            f" FROM decision_effect {where} ORDER BY 1, 2, 3, 4",
            key,
        ).fetchall()
        decisions = [
            str(r[0])
            for r in conn.execute(
                f"SELECT decision_id FROM decision {where} ORDER BY decided_at, decision_id", key
            )
        ]
        values = [
            r[0] for r in conn.execute(f"SELECT value FROM outbox {where} ORDER BY position", key)
        ]
    events = []
    for value in values:
        e = CODEC.decode_value(value)
        payload = {f.name: repr(getattr(e.payload, f.name)) for f in dataclasses.fields(e.payload)}
        events.append((e.position, e.aggregate, e.dependencies, e.event_type, payload))

    def text(rows: list[Any]) -> list[str]:
        out = []
        for row in rows:
            line = repr(row)
            for n, decision_id in enumerate(decisions):
                line = line.replace(decision_id, f"<decision {n}>")
            out.append(line)
        return out

    return {
        "items": text(items),
        "mappings": text(mappings),
        "values": text(attribute_values),
        "effects": sorted(text(effects)),
        "events": text(events),
    }


def refusal(uow: UowFactory, catalog: str, facts: Sequence[Fact], one_by_one: bool) -> str:
    with pytest.raises(DomainError) as caught:
        record(uow, catalog, facts, one_by_one)
    return f"{caught.value.code}: {caught.value}".replace(catalog, "<catalog>")


def test_facts_accepted_together_equal_facts_accepted_one_by_one(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    for step in setup_steps():
        record(uow, "together", step("together"), one_by_one=False)
        record(uow, "alone", step("alone"), one_by_one=True)
    dsn = clean_db.resolver_dsn
    before = state(dsn, "together")
    alone = state(dsn, "alone")
    for kind, rows in before.items():
        assert rows == alone[kind], kind
    assert len(before["items"]) == 16 and len(before["mappings"]) == 8
    assert len(before["values"]) == 7

    errors = []
    for step in REFUSED:
        together = refusal(uow, "together", step("together"), one_by_one=False)
        assert together == refusal(uow, "alone", step("alone"), one_by_one=True)
        errors.append(together.split(":")[0])
    assert errors == [
        "PARENT_NOT_ACTIVE",
        "ITEM_WAS_SPLIT",
        "ITEM_NOT_FOUND",
        "ITEM_WAS_SPLIT",
        "TARGET_NOT_ACTIVE",
        "INVALID_DECISION",
        "ATTRIBUTE_NOT_APPLICABLE",
        "ATTRIBUTE_NOT_PUBLISHED",
        "ITEM_NOT_ACTIVE",
        "ATTRIBUTE_VALUE_INVALID",
        "ATTRIBUTE_NOT_FOUND",
    ]
    # A refused decision leaves nothing behind, either way.
    assert state(dsn, "together") == before


def test_a_decision_of_many_items_sends_as_many_statements_as_one_of_two(
    uow: UowFactory, statements: list[str]
) -> None:
    def count(facts: Sequence[Fact]) -> int:
        statements.clear()
        record(uow, "c1", facts, one_by_one=False)
        return len(statements)

    count([item("c1", "warm-up")])  # the stream's cursor row and epoch exist from here on
    few = count([item("c1", f"a{k}") for k in range(2)])
    many = count([item("c1", f"b{k}") for k in range(100)])
    assert many == few
    assert count([MapListing(f"L{k}", "b1") for k in range(100)]) == count(
        [MapListing(f"M{k}", "a1") for k in range(2)]
    )
    count([DefineAttribute("colour", 1, "Colour", "text", ("shoe",), publish=True)])
    assert count([SetAttributeValue(f"b{k}", "colour", 1, "red") for k in range(100)]) == count(
        [SetAttributeValue(f"a{k}", "colour", 1, "red") for k in range(2)]
    )
    assert count([RetireItem(f"b{k}", "x") for k in range(100)]) == count(
        [RetireItem(f"a{k}", "x") for k in range(2)]
    )


def round_trips(pool: ConnectionPool, write: Callable[[], None]) -> int:
    """How often the client waited for the server while ``write`` ran on the pool's
    one connection (traced while it is in the pool): in libpq's trace of the
    messages, each run of the client's followed by the server's answers."""
    with tempfile.TemporaryFile("w+") as trace:
        conn = pool.getconn()
        conn.pgconn.trace(trace.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        pool.putconn(conn)
        try:
            write()
        finally:
            again = pool.getconn()
            assert again is conn
            conn.pgconn.untrace()
            pool.putconn(conn)
        trace.seek(0)
        sent = [line.split("\t") for line in trace]
    return sum(1 for a, b in itertools.pairwise(sent) if a[0] == "F" and b[0] == "B")


def test_a_decision_of_items_waits_on_two_round_trips_or_three_under_the_lock(
    clean_db: DatabaseSettings,
) -> None:
    """Unlocked (``UnitOfWork.unlocked_first``): the items' states with the cursor, then
    everything in one statement; only that statement when this process's own commit
    left the cursor and the items are new (``db.unlocked.known_cursors``). Under the
    lock: cursor lock (with BEGIN), the items' states (with the decision row), and
    the items, effects, outbox rows and COMMIT together, an existing item's upsert
    in a round trip of its own. Whatever the number of items."""
    epochs = EpochSource(clean_db.control_dsn)
    try:
        with ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=1) as pool:

            def decide(*ids: str, unlocked: bool = True) -> Callable[[], None]:
                def write() -> None:
                    with UnitOfWork(pool, epochs, CODEC, unlocked_reads=unlocked) as u:
                        record_decision(
                            u,
                            Decision(
                                TENANT,
                                "c1",
                                "accept",
                                "rule:test",
                                "test",
                                EVIDENCE,
                                tuple(item("c1", i) for i in ids),
                                actor_kind="rule",
                            ),
                        )

                return write

            decide("first")()  # the stream's cursor row and epoch exist from here on
            # This process's commit left the cursor: new items are presumed absent.
            assert round_trips(pool, decide("one")) == 1
            assert round_trips(pool, decide(*(f"many{k}" for k in range(100)))) == 1
            # Presumed wrong ("one" exists): refused, then under the lock, "one"
            # upserted in a round trip of its own; then read for a while.
            assert round_trips(pool, decide("one", "two")) == 1 + 4
            assert round_trips(pool, decide("five", "six")) == 2
            known_cursors.clear()
            doubted.clear()  # a process that has not written the stream: it reads
            assert round_trips(pool, decide("one", "seven")) == 2
            assert round_trips(pool, decide("three", unlocked=False)) == 3
            assert round_trips(pool, decide(*(f"more{k}" for k in range(100)), unlocked=False)) == 3
            assert round_trips(pool, decide("three", "four", unlocked=False)) == 4
    finally:
        epochs.close()
