"""End to end through real services: rule and reviewer decisions (items, mappings,
policy versions, classes, attribute definitions and values, a split with remaps, a
retirement) → outbox → relay → Kafka →
applier → product projections, which then hold exactly the accepted state."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from infra.demo.projection_check import compare
from processors.applier.batch import Applier
from processors.applier.messages import RawMessage
from producers.relay.publisher import Publisher
from producers.relay.relay import Relay
from producers.resolver.attributes import (
    DefineAttribute,
    DefineClass,
    PublishAttribute,
    SetAttributeValue,
)
from producers.resolver.catalog_items import ItemChange, RetireItem
from producers.resolver.decisions import Decision, record_decision
from producers.resolver.exceptions import OverlappingPolicyWindow
from producers.resolver.facts import Fact
from producers.resolver.listing_mappings import MapListing
from producers.resolver.review_cases import CaseRevision, open_case
from producers.resolver.shipping_policies import VersionShippingPolicy
from producers.resolver.splits import SplitItem, Successor
from schemas.codec import CODEC
from schemas.events import EvidenceRef
from schemas.settings import KafkaSettings
from tests.fixtures.decisions import by_rule

JAN, MAR, JUN = (datetime(2027, m, 1, tzinfo=UTC) for m in (1, 3, 6))
CAPTURE = (EvidenceRef(capture_id="cap-7", locator="$.offers[2]"),)


def by_reviewer(*facts: Fact, case: CaseRevision | None = None, action: str = "map") -> Decision:
    return Decision(
        "t1", "c1", action, "reviewer:ana", "the capture shows it", CAPTURE, facts, case=case
    )


def consume_all(bootstrap: str, topic: str, expected: int) -> list[RawMessage]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"e2e-{topic}"})
    partitions = list(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    seen: list[RawMessage] = []
    while len(seen) < expected:
        batch = consumer.consume(500, timeout=10)
        assert batch, f"only {len(seen)} of {expected} messages arrived"
        for m in batch:
            assert m.error() is None, m.error()
            seen.append(RawMessage(m.topic(), m.partition(), m.offset(), m.key(), m.value()))
    consumer.close()
    return seen


def write_decisions(record: Callable[[Decision], object], uow: Callable[[], UnitOfWork]) -> None:
    shoe = ItemChange("t1", "c1", "i1", "shoe", "trail shoe", attributes={"size": "42"})
    record(by_rule("t1", "c1", shoe, ItemChange("t1", "c1", "i2", "lamp", "desk lamp")))
    record(by_rule("t1", "c1", ItemChange("t1", "c1", "i1-v", "shoe", "wide", parent_item_id="i1")))
    with uow() as u:
        open_case(u, "t1", "c1", "map-1", "listing", "L1")
        u.commit()
    record(
        by_reviewer(
            MapListing("L1", "i1"),
            MapListing("L2", "i1"),
            MapListing("L3", "i2"),
            VersionShippingPolicy("std", "DE", JAN, MAR, {"rate": "4.90"}),
            case=CaseRevision("map-1", 1),
        )
    )
    record(by_rule("t1", "c1", VersionShippingPolicy("std", "DE", MAR, None, {"rate": "5.90"})))
    record(
        by_rule(
            "t1",
            "c1",
            DefineClass("goods"),
            DefineClass("apparel", "goods"),
            DefineClass("shoe", "apparel"),
            DefineClass("lamp", "goods"),
            DefineAttribute("weight_g", 1, "Weight", "number", ("goods",), publish=True),
            DefineAttribute("fit", 1, "Fit", "enum", ("apparel", "lamp"), ("slim", "wide")),
            SetAttributeValue("i1", "weight_g", 1, 310),
            SetAttributeValue("i2", "weight_g", 1, "1200.50"),
            action="define",
        )
    )
    record(by_reviewer(PublishAttribute("fit", 1), action="publish"))
    record(
        by_rule(
            "t1",
            "c1",
            SetAttributeValue("i1-v", "fit", 1, "wide"),
            SetAttributeValue("i1", "weight_g", 1, 305.5),  # revision 2
            action="set",
        )
    )
    with pytest.raises(OverlappingPolicyWindow):  # refused: nothing of it is written
        record(by_rule("t1", "c1", VersionShippingPolicy("std", "DE", JUN, None)))
    record(
        by_reviewer(
            SplitItem(
                "i1",
                (Successor("i1-red", "red trail shoe"), Successor("i1-blue", "blue trail shoe")),
                {"L1": "i1-red", "L2": "i1-blue"},
            ),
            action="split",
        )
    )
    record(by_rule("t1", "c1", RetireItem("i2", "discontinued"), action="retire"))


def test_decisions_flow_through_kafka_to_projections_that_match_the_accepted_state(
    clean_db: DatabaseSettings, kafka_settings: KafkaSettings, topic: str
) -> None:
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=2, open=True)
    epochs = EpochSource(clean_db.control_dsn)

    def uow() -> UnitOfWork:
        return UnitOfWork(pool, epochs, CODEC)

    def record(decision: Decision) -> object:
        with uow() as u:
            return record_decision(u, decision)

    try:
        write_decisions(record, uow)
    finally:
        pool.close()
        epochs.close()

    publisher = Publisher(kafka_settings.kafka_bootstrap, topic)
    relay = Relay(clean_db.resolver_dsn, publisher)
    published = 0
    while done := relay.run_once():
        published += done
    publisher.close()
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        committed = conn.execute("SELECT position FROM stream_cursor").fetchone()
    assert committed == (published,)

    messages = consume_all(kafka_settings.kafka_bootstrap, topic, published)
    applier = Applier(clean_db.product_dsn, EpochSource(clean_db.control_dsn), CODEC)
    try:
        # Small batches in delivery order, as the agents would take them.
        for start in range(0, len(messages), 4):
            applier.apply(messages[start : start + 4])
    finally:
        applier.close()

    result = compare(clean_db.resolver_dsn, clean_db.product_dsn, "t1")
    assert result.differences == []
    assert result.rows == {
        "catalog_item": 5,  # i1 (split), i1-v, i2 (retired), i1-red, i1-blue
        "listing_mapping": 3,
        "shipping_policy_version": 2,
        "item_split": 1,
        "attribute_definition": 2,
        "attribute_value": 3,  # i1 (split, revision 2), i2 (retired), i1-v
    }
    with psycopg.connect(clean_db.product_dsn) as conn:
        source = conn.execute("SELECT status FROM product_item WHERE item_id = 'i1'").fetchone()
        split = conn.execute(
            "SELECT source_item_id, successor_item_ids, remaps FROM product_item_split"
        ).fetchone()
        progress = conn.execute("SELECT position FROM stream_progress").fetchone()
    assert source == ("split",)
    # Successors in code-point order, whatever order the decision named them in.
    assert split == ("i1", ["i1-blue", "i1-red"], {"L1": "i1-red", "L2": "i1-blue"})
    assert progress == committed
    with psycopg.connect(clean_db.product_dsn) as conn:
        values = conn.execute(
            "SELECT item_id, attribute_key, value, revision FROM product_attribute_value"
            " ORDER BY item_id"
        ).fetchall()
    assert values == [
        ("i1", "weight_g", "305.5", 2),
        ("i1-v", "fit", "wide", 1),
        ("i2", "weight_g", "1200.5", 1),
    ]

    # The check sees a projection that drifted from the accepted state.
    with psycopg.connect(clean_db.product_dsn) as conn:
        conn.execute("UPDATE product_item_split SET successor_item_ids = ARRAY['i1-red']::text[]")
        conn.execute("UPDATE product_listing_mapping SET item_id = 'i1' WHERE listing_id = 'L1'")
        # The classes a version applies to are a set: their order is no difference.
        conn.execute(
            """UPDATE product_attribute_definition SET applies_to = '["lamp", "apparel"]'"""
        )
        conn.execute("UPDATE product_attribute_value SET value_type = 'text' WHERE item_id = 'i2'")
    drifted = compare(clean_db.resolver_dsn, clean_db.product_dsn, "t1")
    assert [d.aggregate for d in drifted.differences] == [
        "listing_mapping",
        "item_split",
        "attribute_definition",
        "attribute_value",
    ]
    assert drifted.differences[0].key == ("t1", "c1", "L1")
    assert drifted.differences[2].key == ("t1", "c1", "weight_g", 1)
    assert drifted.differences[3].key == ("t1", "c1", "i2", "weight_g")
