"""The decision write path (AW-01) against real PostgreSQL: each invariant refused
with a typed domain error, and every committed change with its outbox rows."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import psycopg
import psycopg.errors
import pytest

from db.settings import DatabaseSettings
from producers.resolver.catalog_items import ItemChange, RetireItem
from producers.resolver.decisions import Decision, record_decision
from producers.resolver.exceptions import (
    CaseNotFound,
    DomainError,
    EvidenceRequired,
    InvalidPolicyWindow,
    InvalidSplit,
    ItemAlreadyExists,
    ItemWasSplit,
    OverlappingPolicyWindow,
    PriorDecisionNotFound,
    SourceNotActive,
    StaleRevision,
    TargetNotActive,
)
from producers.resolver.listing_mappings import MapListing, map_listing
from producers.resolver.review_cases import CaseRevision, open_case
from producers.resolver.shipping_policies import VersionShippingPolicy
from producers.resolver.splits import SplitItem, Successor
from schemas.codec import CODEC
from schemas.events import CatalogItemUpserted, DecisionRecorded, ListingMapped
from tests.integration.producers.resolver.conftest import (
    EVIDENCE,
    UowFactory,
    add_item,
    assert_contiguous_outbox,
    retire,
)

JAN = datetime(2027, 1, 1, tzinfo=UTC)
MAR = datetime(2027, 3, 1, tzinfo=UTC)
JUN = datetime(2027, 6, 1, tzinfo=UTC)


def decide(uow: UowFactory, *facts: object, **changes: object) -> uuid.UUID:
    fields: dict[str, object] = {
        "tenant_id": "t1",
        "catalog_id": "c1",
        "action": "accept",
        "actor": "reviewer:ana",
        "rationale": "matches the capture",
        "evidence": EVIDENCE,
        "facts": facts,
    }
    fields.update(changes)
    decision = Decision(**fields)  # type: ignore[arg-type]
    with uow() as u:
        record_decision(u, decision)
    return decision.decision_id


def rejected(
    error: type[DomainError], code: str, uow: UowFactory, *facts: object, **kw: object
) -> None:
    with pytest.raises(error) as caught:
        decide(uow, *facts, **kw)
    assert caught.value.code == code


def outbox(dsn: str) -> list[tuple[int, str, str, str, int]]:
    """(position, event type, aggregate type, id, revision) of the t1/c1 outbox."""
    with psycopg.connect(dsn) as conn:
        values = [
            r[0]
            for r in conn.execute(
                "SELECT value FROM outbox WHERE tenant_id = 't1' AND catalog_id = 'c1'"
                " ORDER BY position"
            )
        ]
    envelopes = [CODEC.decode_value(v) for v in values]
    return [
        (e.position, e.event_type, e.aggregate.type, e.aggregate.id, e.aggregate.revision)
        for e in envelopes
    ]


# --- INV-05: decisions and the facts that reference them ---------------------------


def test_a_decision_without_evidence_is_refused(uow: UowFactory) -> None:
    rejected(EvidenceRequired, "EVIDENCE_REQUIRED", uow, evidence=())


def test_postgres_refuses_empty_or_malformed_evidence(clean_db: DatabaseSettings) -> None:
    for evidence in ("[]", '[{"capture_id": "c"}]', '{"capture_id": "c", "locator": "l"}'):
        with (
            psycopg.connect(clean_db.resolver_dsn) as conn,
            pytest.raises(psycopg.errors.CheckViolation),
        ):
            conn.execute(
                "INSERT INTO decision (tenant_id, catalog_id, decision_id, action, actor,"
                " actor_kind, rationale, evidence) VALUES ('t1', 'c1', %s, 'a', 'b',"
                " 'human', 'r', %s::jsonb)",
                (uuid.uuid4(), evidence),
            )


def test_every_fact_names_an_existing_decision(uow: UowFactory, clean_db: DatabaseSettings) -> None:
    add_item(uow, "i1")
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        insert = (
            "INSERT INTO listing_mapping (tenant_id, catalog_id, listing_id, item_id,"
            " item_revision, decision_id, revision) VALUES ('t1', 'c1', 'L1', 'i1', 1, %s, 1)"
        )
        with pytest.raises(psycopg.errors.NotNullViolation):
            conn.execute(insert, (None,))
        conn.rollback()
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute(insert, (uuid.uuid4(),))


def test_every_item_revision_names_an_existing_decision(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    created = add_item(uow, "i1")
    retired = decide(uow, RetireItem("i1", "gone"), action="retire")
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        assert conn.execute("SELECT decision_id FROM catalog_item").fetchone() == (retired,)
        assert created != str(retired)
        insert = (
            "INSERT INTO catalog_item (tenant_id, catalog_id, item_id, class_id, status, title,"
            " revision, decision_id) VALUES ('t1', 'c1', 'i2', 'shoe', 'active', 't', 1, %s)"
        )
        with pytest.raises(psycopg.errors.NotNullViolation):
            conn.execute(insert, (None,))
        conn.rollback()
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute(insert, (uuid.uuid4(),))


def test_unknown_prior_decision_is_refused(uow: UowFactory) -> None:
    rejected(
        PriorDecisionNotFound, "PRIOR_DECISION_NOT_FOUND", uow, prior_decision_ids=(uuid.uuid4(),)
    )
    first = decide(uow)
    second = decide(uow, prior_decision_ids=(first,), action="correct")
    assert first != second


# --- INV-04: review cases ----------------------------------------------------------


def test_a_decision_on_a_stale_case_revision_is_refused(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    with uow() as u:
        open_case(u, "t1", "c1", "case-1", "listing", "L1")
        u.commit()
    decide(uow, case=CaseRevision("case-1", 1))
    with pytest.raises(StaleRevision) as caught:
        decide(uow, case=CaseRevision("case-1", 1))
    assert (caught.value.code, caught.value.http_status) == ("STALE_REVISION", 409)
    decide(uow, case=CaseRevision("case-1", 2))
    rejected(CaseNotFound, "CASE_NOT_FOUND", uow, case=CaseRevision("no-case", 1))
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        case = conn.execute("SELECT status, revision FROM review_case").fetchone()
        made_against = conn.execute(
            "SELECT case_revision FROM decision ORDER BY case_revision"
        ).fetchall()
    assert case == ("decided", 3)
    assert made_against == [(1,), (2,)]
    # Only the two accepted decisions reached the outbox.
    assert [row[1] for row in outbox(clean_db.resolver_dsn)] == ["decision.recorded"] * 2


# --- INV-01: listing mappings --------------------------------------------------------


def test_a_listing_maps_only_onto_an_active_item(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add_item(uow, "i1")
    rejected(TargetNotActive, "TARGET_NOT_ACTIVE", uow, MapListing("L1", "missing"))
    decide(uow, MapListing("L1", "i1"))
    retire(uow, "i1")
    rejected(TargetNotActive, "TARGET_NOT_ACTIVE", uow, MapListing("L2", "i1"))

    with psycopg.connect(clean_db.resolver_dsn) as conn:
        value = conn.execute(
            "SELECT value FROM outbox WHERE event_type = 'listing_mapping.mapped'"
        ).fetchone()
    assert value is not None
    event = CODEC.decode_value(value[0])
    assert isinstance(event.payload, ListingMapped)
    assert (event.aggregate.id, event.aggregate.revision) == ("L1", 1)
    assert [(d.type, d.id, d.revision) for d in event.dependencies] == [("catalog_item", "i1", 1)]


def test_the_target_item_is_share_locked_until_the_mapping_commits(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    """Even a writer that skipped the cursor lock cannot retire the target meanwhile."""
    add_item(uow, "i1")
    decision_id = decide(uow)
    with uow() as u:
        map_listing(u, "t1", "c1", decision_id, MapListing("L1", "i1"))
        with psycopg.connect(clean_db.resolver_dsn) as other:
            other.execute("SET lock_timeout = '300ms'")
            with pytest.raises(psycopg.errors.LockNotAvailable):
                other.execute("UPDATE catalog_item SET status = 'retired' WHERE item_id = 'i1'")


# --- INV-03: shipping policy windows --------------------------------------------------


def test_overlapping_policy_windows_are_refused(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    decide(uow, VersionShippingPolicy("std", "DE", JAN, MAR, {"rate": "4.90"}))
    decide(uow, VersionShippingPolicy("std", "DE", MAR))  # adjacent: [Jan, Mar) [Mar, ∞)
    decide(uow, VersionShippingPolicy("std", "FR", JAN))  # another scope
    rejected(
        OverlappingPolicyWindow,
        "OVERLAPPING_POLICY_WINDOW",
        uow,
        VersionShippingPolicy("std", "DE", JUN, datetime(2027, 7, 1, tzinfo=UTC)),
    )
    with pytest.raises(InvalidPolicyWindow):
        VersionShippingPolicy("std", "DE", MAR, JAN)
    events = [row for row in outbox(clean_db.resolver_dsn) if row[2] == "shipping_policy"]
    assert [row[4] for row in events] == [1, 2, 3]


# --- INV-08: splits -------------------------------------------------------------------


def test_a_split_keeps_the_source_item_and_earlier_decisions(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    created_by = uuid.UUID(add_item(uow, "i1"))
    mapped_by = decide(uow, MapListing("L1", "i1"), MapListing("L2", "i1"))
    split = SplitItem(
        "i1",
        (Successor("i1-red", "red one"), Successor("i1-blue", "blue one")),
        {"L1": "i1-red", "L2": "i1-blue"},
    )
    with pytest.raises(InvalidSplit):
        decide(uow, SplitItem("i1", split.successors, {"L1": "i1-red"}))
    with pytest.raises(InvalidSplit):
        SplitItem("i1", ())
    every_column = "SELECT * FROM decision ORDER BY decision_id"
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        before = conn.execute(every_column).fetchall()
    split_by = decide(uow, split, action="split", prior_decision_ids=(mapped_by,))
    rejected(SourceNotActive, "SOURCE_NOT_ACTIVE", uow, SplitItem("i1", (Successor("x", "x"),)))
    created_i2_by = uuid.UUID(add_item(uow, "i2"))
    rejected(
        ItemAlreadyExists, "ITEM_ALREADY_EXISTS", uow, SplitItem("i2", (Successor("i1-red", "r"),))
    )

    with psycopg.connect(clean_db.resolver_dsn) as conn:
        items = conn.execute(
            "SELECT item_id, status, revision, decision_id FROM catalog_item ORDER BY item_id"
        ).fetchall()
        listings = conn.execute(
            "SELECT listing_id, item_id, revision, decision_id FROM listing_mapping"
            " ORDER BY listing_id"
        ).fetchall()
        decisions = conn.execute("SELECT decision_id, action FROM decision").fetchall()
        after = conn.execute(every_column).fetchall()
        split_row = conn.execute(
            "SELECT source_item_id, source_revision, decision_id FROM item_split"
        ).fetchone()
    assert items == [
        ("i1", "split", 2, split_by),
        ("i1-blue", "active", 1, split_by),
        ("i1-red", "active", 1, split_by),
        ("i2", "active", 1, created_i2_by),
    ]
    assert listings == [("L1", "i1-red", 2, split_by), ("L2", "i1-blue", 2, split_by)]
    assert sorted(decisions) == sorted(
        [
            (created_by, "accept"),
            (mapped_by, "accept"),
            (split_by, "split"),
            (created_i2_by, "accept"),
        ]
    )
    assert all(row in after for row in before)  # every column of every earlier decision
    assert split_row == ("i1", 2, split_by)

    events = outbox(clean_db.resolver_dsn)
    # After i1 and its decision, the mapping decision and its two mappings; before i2
    # and its decision.
    split_events = [row[1:] for row in events[5:12]]
    assert split_events[:6] == [
        ("decision.recorded", "decision", str(split_by), 1),
        ("catalog_item.upserted", "catalog_item", "i1", 2),
        ("catalog_item.upserted", "catalog_item", "i1-red", 1),
        ("catalog_item.upserted", "catalog_item", "i1-blue", 1),
        ("listing_mapping.mapped", "listing_mapping", "L1", 2),
        ("listing_mapping.mapped", "listing_mapping", "L2", 2),
    ]
    assert split_events[6][:2] == ("item_split.recorded", "item_split")
    assert [e[1:4] for e in events[12:]] == [
        ("decision.recorded", "decision", str(created_i2_by)),
        ("catalog_item.upserted", "catalog_item", "i2"),
    ]


def test_a_split_item_can_be_neither_changed_nor_retired(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add_item(uow, "i1")
    decide(uow, SplitItem("i1", (Successor("i1-a", "a"),)), action="split")
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        before = conn.execute("SELECT * FROM catalog_item ORDER BY item_id").fetchall()
    change = ItemChange("t1", "c1", "i1", "shoe", "back from the dead")
    rejected(ItemWasSplit, "ITEM_WAS_SPLIT", uow, change)
    rejected(ItemWasSplit, "ITEM_WAS_SPLIT", uow, RetireItem("i1", "gone"))
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        after = conn.execute("SELECT * FROM catalog_item ORDER BY item_id").fetchall()
    assert after == before
    decide(uow, RetireItem("i1-a", "gone"))  # the successor lives on as any item does


def test_the_source_status_reaches_consumers_as_an_item_upsert(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add_item(uow, "i1")
    decide(uow, SplitItem("i1", (Successor("i1-a", "a"),)))
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        values = [r[0] for r in conn.execute("SELECT value FROM outbox ORDER BY position")]
    payloads = [CODEC.decode_value(v).payload for v in values]
    assert isinstance(payloads[2], DecisionRecorded)  # after i1's decision and i1
    assert isinstance(payloads[3], CatalogItemUpserted) and payloads[3].status == "split"


# --- the application role (INV-05, INV-08) ------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM catalog_item",
        "DELETE FROM decision",
        "DELETE FROM decision_prior",
        "UPDATE decision SET rationale = 'rewritten'",
        "UPDATE decision_prior SET prior_decision_id = decision_id",
    ],
)
def test_the_application_role_cannot_delete_items_or_touch_decisions(
    uow: UowFactory, clean_db: DatabaseSettings, statement: str
) -> None:
    add_item(uow, "i1")
    decide(uow)
    with (
        psycopg.connect(clean_db.resolver_dsn) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute(statement)


def test_the_application_role_may_prune_the_outbox(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    decide(uow)
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        deleted = conn.execute("DELETE FROM outbox WHERE position = 1").rowcount
    assert deleted == 1


# --- INV-06: every committed change has its outbox rows --------------------------------


def test_committed_decisions_and_only_they_have_contiguous_outbox_rows(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add_item(uow, "i1")
    decide(uow, MapListing("L1", "i1"), VersionShippingPolicy("std", "DE", JAN))
    # Each failure comes after the decision row and some facts were written.
    for facts in (
        (MapListing("L2", "i1"), MapListing("L3", "gone")),
        (MapListing("L2", "i1"), VersionShippingPolicy("std", "DE", MAR)),
    ):
        with pytest.raises(DomainError):
            decide(uow, *facts)
    decide(uow, MapListing("L2", "i1"))
    assert [row[1] for row in outbox(clean_db.resolver_dsn)] == [
        "decision.recorded",
        "catalog_item.upserted",
        "decision.recorded",
        "listing_mapping.mapped",
        "shipping_policy.versioned",
        "decision.recorded",
        "listing_mapping.mapped",
    ]
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM decision").fetchone() == (3,)
        assert conn.execute("SELECT count(*) FROM listing_mapping").fetchone() == (2,)
    assert_contiguous_outbox(clean_db.resolver_dsn)


# --- decision effects: what each decision changed and relied on -------------------------


def effects(dsn: str, decision_id: uuid.UUID) -> list[tuple[str, str, str, int]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT role, aggregate_type, aggregate_id, revision FROM decision_effect"
            " WHERE decision_id = %s ORDER BY role, aggregate_type, aggregate_id, revision",
            (decision_id,),
        ).fetchall()
    return [tuple(r) for r in rows]


def test_a_decision_records_every_revision_it_changed_and_relied_on(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add_item(uow, "i1")
    mapped = decide(uow, MapListing("L1", "i1"), MapListing("L2", "i1"))
    assert effects(clean_db.resolver_dsn, mapped) == [
        ("changed", "decision", str(mapped), 1),
        ("changed", "listing_mapping", "L1", 1),
        ("changed", "listing_mapping", "L2", 1),
        ("relied_on", "catalog_item", "i1", 1),  # once, though both mappings rest on it
    ]
    split = SplitItem("i1", (Successor("i1-a", "a"),), {"L1": "i1-a", "L2": "i1-a"})
    split_by = decide(uow, split, action="split")
    # Every event of the decision is a 'changed' row; the split's own dependencies
    # (source and successor) are revisions it changed, so nothing is relied on.
    assert effects(clean_db.resolver_dsn, split_by) == [
        ("changed", "catalog_item", "i1", 2),
        ("changed", "catalog_item", "i1-a", 1),
        ("changed", "decision", str(split_by), 1),
        ("changed", "item_split", str(split.split_id), 1),
        ("changed", "listing_mapping", "L1", 2),
        ("changed", "listing_mapping", "L2", 2),
    ]
    # One 'changed' row per outbox event: every event was written by a decision.
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        changed = conn.execute(
            "SELECT aggregate_type, aggregate_id, revision FROM decision_effect"
            " WHERE role = 'changed'"
        ).fetchall()
    assert sorted(changed) == sorted(row[2:] for row in outbox(clean_db.resolver_dsn))


def test_a_refused_decision_leaves_no_effects(uow: UowFactory, clean_db: DatabaseSettings) -> None:
    created = add_item(uow, "i1")
    with pytest.raises(TargetNotActive):
        decide(uow, MapListing("L1", "i1"), MapListing("L2", "gone"))
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        kept = conn.execute("SELECT DISTINCT decision_id::text FROM decision_effect").fetchall()
    assert kept == [(created,)]  # only the item's own decision


def test_effects_are_immutable_and_one_decision_per_revision(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    first = decide(uow)
    second = decide(uow)
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        for statement in ("UPDATE decision_effect SET revision = 2", "DELETE FROM decision_effect"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
            conn.rollback()
        # A second decision cannot claim a revision the first one produced.
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                "INSERT INTO decision_effect (tenant_id, catalog_id, aggregate_type,"
                " aggregate_id, revision, role, decision_id)"
                " VALUES ('t1', 'c1', 'decision', %s, 1, 'changed', %s)",
                (str(first), second),
            )
