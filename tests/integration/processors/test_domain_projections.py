"""The listing-mapping, shipping-policy and split projections through ``Applier.apply``,
against the real product database (and, for the first test, the resolver's own
events from a real decision)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource, ensure_epoch
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from processors.applier.batch import DEFAULT_CONSUMER, Applier
from processors.applier.messages import RawMessage
from producers.resolver.catalog_items import ItemChange
from producers.resolver.decisions import Decision, record_decision
from producers.resolver.listing_mappings import MapListing
from producers.resolver.shipping_policies import VersionShippingPolicy
from schemas.codec import CODEC
from schemas.events import (
    AggregateRef,
    CatalogItemSplit,
    CatalogItemUpserted,
    DecisionRecorded,
    Envelope,
    EvidenceRef,
    ListingMapped,
    Payload,
    ShippingPolicyVersioned,
)
from schemas.topics import EVENTS_TOPIC
from tests.fixtures.decisions import accept

TENANT, CATALOG = "t1", "c1"
T0 = datetime(2027, 1, 1, tzinfo=UTC)
DECISION = uuid.uuid4()
EVIDENCE = (EvidenceRef(capture_id="cap-1", locator="$.offers[0]"),)


@pytest.fixture()
def applier(clean_db: DatabaseSettings) -> Iterator[Applier]:
    with psycopg.connect(clean_db.control_dsn, autocommit=True) as control:
        ensure_epoch(control, TENANT, CATALOG)
    epochs = EpochSource(clean_db.control_dsn)
    applier = Applier(clean_db.product_dsn, epochs, CODEC)
    yield applier
    applier.close()
    epochs.close()


def message(e: Envelope) -> RawMessage:
    return RawMessage(EVENTS_TOPIC, 0, e.position - 1, None, CODEC.encode_value(e))


def envelope(
    position: int, aggregate: AggregateRef, payload: Payload, *deps: AggregateRef
) -> Envelope:
    return Envelope(
        tenant_id=TENANT,
        catalog_id=CATALOG,
        history_epoch=1,
        position=position,
        event_id=uuid.uuid4(),
        aggregate=aggregate,
        dependencies=deps,
        occurred_at=T0,
        payload=payload,
    )


def item(position: int, item_id: str, revision: int) -> Envelope:
    return envelope(
        position,
        AggregateRef(type="catalog_item", id=item_id, revision=revision),
        CatalogItemUpserted(class_id="shoe", status="active", title=f"{item_id} r{revision}"),
    )


def mapping(
    position: int, listing: str, revision: int, item_id: str, item_revision: int
) -> Envelope:
    return envelope(
        position,
        AggregateRef(type="listing_mapping", id=listing, revision=revision),
        ListingMapped(item_id=item_id, item_revision=item_revision, decision_id=DECISION),
        AggregateRef(type="catalog_item", id=item_id, revision=item_revision),
    )


def policy(
    position: int, policy_id: str, version: int, scope: str = "DE", open_end: bool = False
) -> Envelope:
    start = T0 + timedelta(days=30 * version)
    return envelope(
        position,
        AggregateRef(type="shipping_policy", id=policy_id, revision=version),
        ShippingPolicyVersioned(
            scope=scope,
            effective_from=start,
            effective_to=None if open_end else start + timedelta(days=30),
            terms={"carrier": f"v{version}"},
            decision_id=DECISION,
        ),
    )


def decision(position: int) -> Envelope:
    return envelope(
        position,
        AggregateRef(type="decision", id=str(DECISION), revision=1),
        DecisionRecorded(
            action="map", actor="ana", actor_kind="human", rationale="r", evidence=EVIDENCE
        ),
    )


def mappings(dsn: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT generation, listing_id, item_id, item_revision, decision_id, revision,"
            " position FROM product_listing_mapping ORDER BY listing_id"
        ).fetchall()


def policies(dsn: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT policy_id, version, scope, effective_from, effective_to, terms, decision_id,"
            " position FROM product_shipping_policy_version ORDER BY policy_id, version"
        ).fetchall()


def inbox(dsn: str) -> dict[uuid.UUID, str]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT event_id, outcome FROM inbox").fetchall())


def parked(dsn: str) -> set[uuid.UUID]:
    with psycopg.connect(dsn) as conn:
        return {r[0] for r in conn.execute("SELECT event_id FROM parked_event")}


def progress(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT position FROM stream_progress WHERE consumer = %s", (DEFAULT_CONSUMER,)
        ).fetchone()
    return int(row[0]) if row else 0


def test_the_resolvers_mapping_waits_for_its_item_and_the_projection_matches(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    """A real decision's events, delivered last first: the mapping parks until the
    item revision its event depends on arrives, then both commit together."""
    pool = ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=1, open=True)
    epochs = EpochSource(clean_db.control_dsn)
    try:
        with UnitOfWork(pool, epochs, CODEC) as uow:
            accept(uow, TENANT, CATALOG, ItemChange(TENANT, CATALOG, "i1", "shoe", "a shoe"))
        with UnitOfWork(pool, epochs, CODEC) as uow:
            record_decision(
                uow,
                Decision(
                    TENANT,
                    CATALOG,
                    "map",
                    "ana",
                    "same offer",
                    EVIDENCE,
                    facts=(
                        MapListing("L1", "i1"),
                        VersionShippingPolicy("std", "DE", T0, T0 + timedelta(days=30)),
                    ),
                ),
            )
    finally:
        pool.close()
        epochs.close()
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        rows = conn.execute("SELECT position, value FROM outbox ORDER BY position").fetchall()
        accepted_mappings = conn.execute(
            "SELECT listing_id, item_id, item_revision, decision_id, revision FROM listing_mapping"
        ).fetchall()
        accepted_policies = conn.execute(
            "SELECT policy_id, version, scope, effective_from, effective_to, terms, decision_id"
            " FROM shipping_policy_version"
        ).fetchall()
    messages = [RawMessage(EVENTS_TOPIC, 0, p - 1, None, bytes(v)) for p, v in rows]
    events = [CODEC.decode_value(m.value or b"") for m in messages]
    assert [e.event_type for e in events] == [
        "decision.recorded",
        "catalog_item.upserted",
        "decision.recorded",
        "listing_mapping.mapped",
        "shipping_policy.versioned",
    ]
    mapped = events[3]
    assert mapped.dependencies == (AggregateRef(type="catalog_item", id="i1", revision=1),)

    first = applier.apply([*messages[:1:-1], messages[0]])  # all but the item, last first
    assert (first.applied, first.parked) == (3, 1)
    assert parked(clean_db.product_dsn) == {mapped.event_id}
    assert mappings(clean_db.product_dsn) == []
    assert progress(clean_db.product_dsn) == 1  # position 2 (the item) is missing

    second = applier.apply(messages[1:2])
    assert (second.applied, second.released) == (2, 1)
    assert parked(clean_db.product_dsn) == set()
    assert set(inbox(clean_db.product_dsn).values()) == {"applied"}
    assert progress(clean_db.product_dsn) == 5
    assert [r[1:6] for r in mappings(clean_db.product_dsn)] == accepted_mappings
    assert [r[:7] for r in policies(clean_db.product_dsn)] == accepted_policies


def test_a_mapping_before_its_item_is_parked_and_released_when_the_item_arrives(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    events = [decision(1), item(2, "i1", 1), mapping(3, "L1", 1, "i1", 1)]
    early = applier.apply([message(events[0]), message(events[2])])
    assert (early.applied, early.parked, early.released) == (1, 1, 0)
    assert inbox(clean_db.product_dsn) == {
        events[0].event_id: "applied",
        events[2].event_id: "parked",
    }
    assert mappings(clean_db.product_dsn) == []
    assert progress(clean_db.product_dsn) == 1

    late = applier.apply([message(events[1])])
    assert (late.applied, late.parked, late.released) == (2, 0, 1)
    assert mappings(clean_db.product_dsn) == [(1, "L1", "i1", 1, DECISION, 1, 3)]
    assert parked(clean_db.product_dsn) == set()
    assert progress(clean_db.product_dsn) == 3


def test_a_mapping_waits_for_the_item_revision_not_just_the_item(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    events = [item(1, "i1", 1), item(2, "i1", 2), mapping(3, "L1", 1, "i1", 2)]
    first = applier.apply([message(events[0]), message(events[2])])
    assert (first.applied, first.parked) == (1, 1)
    assert mappings(clean_db.product_dsn) == []
    second = applier.apply([message(events[1])])
    assert second.released == 1
    assert mappings(clean_db.product_dsn) == [(1, "L1", "i1", 2, DECISION, 1, 3)]


def test_a_mapping_never_moves_back_to_an_earlier_revision(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    events = [item(1, "i1", 1), item(2, "i2", 1), mapping(3, "L1", 1, "i1", 1)]
    events.append(mapping(4, "L1", 2, "i2", 1))
    applier.apply([message(events[0]), message(events[1]), message(events[3])])
    late = applier.apply([message(events[2])])
    assert (late.applied, late.ignored) == (0, 1)
    assert inbox(clean_db.product_dsn)[events[2].event_id] == "ignored_stale"
    assert mappings(clean_db.product_dsn) == [(1, "L1", "i2", 1, DECISION, 2, 4)]
    assert progress(clean_db.product_dsn) == 4


def test_policy_versions_are_all_projected_whatever_the_order(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    v1, v2, other = (
        policy(1, "std", 1),
        policy(2, "std", 2, scope="AT"),
        policy(3, "exp", 1, open_end=True),
    )
    applier.apply([message(v2)])
    assert [r[:3] for r in policies(clean_db.product_dsn)] == [("std", 2, "AT")]
    result = applier.apply([message(other), message(v1)])
    assert (result.applied, result.ignored) == (2, 0)  # version 1 is not stale
    rows = policies(clean_db.product_dsn)
    assert [r[:3] for r in rows] == [("exp", 1, "DE"), ("std", 1, "DE"), ("std", 2, "AT")]
    start = T0 + timedelta(days=60)
    assert rows[2][3:] == (start, start + timedelta(days=30), {"carrier": "v2"}, DECISION, 2)
    assert rows[0][4] is None  # an open end stays open
    assert progress(clean_db.product_dsn) == 3

    # Once 1..2 are stored, version 1 again at a new position is stale; a copy under
    # another event id at a position progress has passed is not a duplicate: the
    # stream's history went back (an unfenced restore), so it is quarantined
    # STREAM_REWOUND and nothing of it applied.
    again = policy(4, "std", 1)
    assert applier.apply([message(again)]).ignored == 1
    behind = applier.apply([message(policy(1, "std", 1))])
    assert (behind.duplicates, behind.ignored, behind.applied) == (0, 0, 0)
    assert behind.quarantined == 1
    with psycopg.connect(clean_db.product_dsn) as conn:
        codes = conn.execute("SELECT error_code FROM quarantine").fetchall()
    assert codes == [("STREAM_REWOUND",)]
    assert len(policies(clean_db.product_dsn)) == 3


def test_duplicates_are_absorbed(clean_db: DatabaseSettings, applier: Applier) -> None:
    events = [
        decision(1),
        mapping(2, "L1", 1, "i1", 1),
        item(3, "i1", 1),
        policy(4, "std", 1),
    ]
    messages = [message(e) for e in events]
    first = applier.apply([messages[1], messages[1], messages[3], messages[3]])
    assert (first.applied, first.parked, first.duplicates) == (1, 1, 2)
    before = (mappings(clean_db.product_dsn), policies(clean_db.product_dsn))
    again = applier.apply([messages[1], messages[3]])
    assert (again.duplicates, again.applied, again.parked) == (2, 0, 0)
    assert (mappings(clean_db.product_dsn), policies(clean_db.product_dsn)) == before

    applier.apply(messages)  # everything, twice over for three of them
    whole = applier.apply(messages)  # a whole redelivery after a crash before the ack
    assert whole.duplicates == 4 and whole.applied == whole.released == 0
    assert len(mappings(clean_db.product_dsn)) == 1
    assert len(policies(clean_db.product_dsn)) == 1
    assert set(inbox(clean_db.product_dsn).values()) == {"applied"}
    assert progress(clean_db.product_dsn) == 4


def split_event(position: int, split_id: uuid.UUID) -> Envelope:
    return envelope(
        position,
        AggregateRef(type="item_split", id=str(split_id), revision=1),
        CatalogItemSplit(
            source_item_id="i1",
            source_revision=2,
            successor_item_ids=("i1-a", "i1-b"),
            remaps={"L1": "i1-b"},
            decision_id=DECISION,
        ),
        AggregateRef(type="catalog_item", id="i1", revision=2),
        AggregateRef(type="catalog_item", id="i1-a", revision=1),
        AggregateRef(type="catalog_item", id="i1-b", revision=1),
    )


def splits(dsn: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT split_id, source_item_id, source_revision, successor_item_ids, remaps,"
            " decision_id, revision, position FROM product_item_split"
        ).fetchall()


def test_a_split_waits_for_its_items_and_is_projected_once(
    clean_db: DatabaseSettings, applier: Applier
) -> None:
    split_id = uuid.uuid4()
    items = [item(1, "i1", 1), item(2, "i1", 2), item(3, "i1-a", 1), item(4, "i1-b", 1)]
    early = applier.apply([message(split_event(5, split_id)), *map(message, items[:3])])
    assert (early.applied, early.parked) == (3, 1)
    assert splits(clean_db.product_dsn) == []

    late = applier.apply([message(items[3])])
    assert (late.applied, late.released) == (2, 1)
    assert splits(clean_db.product_dsn) == [
        (split_id, "i1", 2, ["i1-a", "i1-b"], {"L1": "i1-b"}, DECISION, 1, 5)
    ]
    # The same split re-emitted under another event id at a new position is stale,
    # not a second row.
    again = applier.apply([message(split_event(6, split_id))])
    assert (again.applied, again.ignored) == (0, 1)
    assert len(splits(clean_db.product_dsn)) == 1
    assert progress(clean_db.product_dsn) == 6
