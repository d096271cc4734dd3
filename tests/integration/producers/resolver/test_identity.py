"""Identity generations and keys (INV-02) against real PostgreSQL: the lifecycle
(backfill, collisions, approval, retirement), what lookups serve, the unique key
constraint under races, and the recovery of interrupted backfills."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg
import psycopg.errors
import pytest

from db.repositories import identity as repo
from db.repositories.identity import GenerationKey
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from producers.resolver.catalog_items import ItemChange, RetireItem
from producers.resolver.decisions import Decision, Recorded, record_decision
from producers.resolver.exceptions import (
    BackfillIncomplete,
    BackfillStale,
    CollisionAlreadyResolved,
    DomainError,
    GenerationAlreadyActivated,
    GenerationNotActive,
    GenerationNotFound,
    GenerationNotReady,
    HumanApprovalRequired,
    IdentityConflict,
    InvalidCollisionResolution,
    InvalidIdentity,
    StaleRevision,
    StrongIdMismatch,
    TargetNotActive,
    UnresolvedCollisions,
)
from producers.resolver.facts import DecisionScope
from producers.resolver.identity import (
    ActivateGeneration,
    AssignIdentity,
    IdentityRule,
    ReleaseIdentity,
    ResolveCollision,
    backfill_generation,
    create_and_backfill,
    create_generation,
    identity_hash,
    lookup,
    lookup_item,
    pinned_generation,
)
from producers.resolver.splits import SplitItem, Successor
from schemas.codec import CODEC
from schemas.events import DecisionRecorded
from tests.fixtures.decisions import accept
from tests.integration.producers.resolver.conftest import (
    EVIDENCE,
    UowFactory,
    assert_contiguous_outbox,
)
from tests.integration.producers.resolver.test_races import ROUNDS, race

T, C, SHOE = "t1", "c1", "shoe"
BRAND_MPN = IdentityRule(("brand", "mpn"))
GTIN_RULE = IdentityRule(("gtin",))
EAN13 = "4006381333931"
OTHER_EAN13 = "4006381333924"


def h(brand: str, mpn: str) -> str:
    digest = identity_hash(BRAND_MPN, {"brand": brand, "mpn": mpn})
    assert digest is not None
    return digest


def add(
    uow: UowFactory, item_id: str, class_id: str = SHOE, catalog: str = C, **attributes: str
) -> None:
    with uow() as u:
        accept(u, T, catalog, ItemChange(T, catalog, item_id, class_id, item_id, None, attributes))


def decide(
    uow: UowFactory, *facts: object, catalog: str = C, actor_kind: str = "human"
) -> Recorded:
    decision = Decision(
        tenant_id=T,
        catalog_id=catalog,
        action="identity",
        actor="reviewer:ana",
        rationale="reviewed the backfill",
        evidence=EVIDENCE,
        facts=facts,  # type: ignore[arg-type]
        actor_kind=actor_kind,
    )
    with uow() as u:
        return record_decision(u, decision)


def gen_row(uow: UowFactory, generation: int, class_id: str = SHOE) -> repo.GenerationRow:
    with uow() as u:
        row = repo.get_generation(u.tx, GenerationKey(T, C, class_id, generation))
    assert row is not None
    return row


def new_generation(uow: UowFactory, rule: IdentityRule = BRAND_MPN, class_id: str = SHOE) -> int:
    report = create_and_backfill(uow, T, C, class_id, rule)
    return report.generation.key.generation


def approve(uow: UowFactory, generation: int, class_id: str = SHOE, **kw: object) -> Recorded:
    revision = gen_row(uow, generation, class_id).revision
    fact = ActivateGeneration(class_id, generation, revision)
    return decide(uow, fact, **kw)  # type: ignore[arg-type]


def find(uow: UowFactory, generation: int, digest: str, **strong: str) -> str | None:
    with uow() as u:
        return lookup_item(u.tx, T, C, SHOE, generation, digest, strong)


def counts(dsn: str) -> tuple[int, int, int]:
    """Decisions, outbox rows, and the stream cursor's position."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM decision), (SELECT count(*) FROM outbox),"
            " (SELECT coalesce(max(position), 0) FROM stream_cursor)"
        ).fetchone()
    assert row is not None
    return (int(row[0]), int(row[1]), int(row[2]))


def shoes(uow: UowFactory) -> None:
    """a and b share brand and mpn (a collision); c is alone; d lacks an mpn."""
    add(uow, "a", brand="ACME", mpn="X-1", gtin=EAN13)
    add(uow, "b", brand=" acme ", mpn="x-1")
    add(uow, "c", brand="ACME", mpn="X-2")
    add(uow, "d", brand="ACME")
    add(uow, "boot", class_id="boot", brand="ACME", mpn="X-2")


# --- lifecycle -----------------------------------------------------------------------


def test_backfill_keys_unique_hashes_and_keeps_shared_ones_as_candidates(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    shoes(uow)
    report = create_and_backfill(uow, T, C, SHOE, BRAND_MPN)
    assert (report.item_count, report.key_count, report.collision_count) == (4, 1, 1)
    assert report.unkeyed_item_count == 1
    row = report.generation
    assert (row.key.generation, row.status, row.revision) == (1, "ready", 2)
    assert row.rule_fields == ("brand", "mpn") and row.item_count == 4
    key = row.key
    with uow() as u:
        assert repo.keys_by_item(u.tx, key) == {"c": h("acme", "x-2")}
        assert repo.candidates_by_item(u.tx, key) == {"a": h("acme", "x-1"), "b": h("acme", "x-1")}
        assert repo.strong_ids(u.tx, T, C, "a") == {"gtin": "0" + EAN13}
    # Nothing is served before activation: not the ready key, not the candidates.
    assert find(uow, 1, h("acme", "x-2")) is None
    assert find(uow, 1, h("acme", "x-1")) is None
    # Identity work commits no events and takes no stream position (each add is a rule
    # decision: its own event and the item's).
    assert counts(clean_db.resolver_dsn)[1:] == (10, 10)


def test_activation_refused_while_backfilling(uow: UowFactory, clean_db: DatabaseSettings) -> None:
    add(uow, "c", brand="ACME", mpn="X-2")
    with uow() as u:
        create_generation(u, T, C, SHOE, BRAND_MPN)
    before = counts(clean_db.resolver_dsn)
    with pytest.raises(BackfillIncomplete) as raised:
        decide(uow, ActivateGeneration(SHOE, 1, 1))
    assert raised.value.code == "BACKFILL_INCOMPLETE" and raised.value.http_status == 409
    assert gen_row(uow, 1).status == "backfilling"
    assert counts(clean_db.resolver_dsn) == before


def test_activation_refused_with_open_collisions_until_resolved(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    shoes(uow)
    gen = new_generation(uow)
    before = counts(clean_db.resolver_dsn)
    with pytest.raises(UnresolvedCollisions) as raised:
        approve(uow, gen)
    assert raised.value.code == "UNRESOLVED_COLLISIONS"
    assert gen_row(uow, gen).status == "ready"
    assert counts(clean_db.resolver_dsn) == before

    shared = h("acme", "x-1")
    with pytest.raises(InvalidCollisionResolution):
        decide(uow, ResolveCollision(SHOE, gen, shared, "c"))
    revision = gen_row(uow, gen).revision
    resolved = decide(uow, ResolveCollision(SHOE, gen, shared, "a"))
    with pytest.raises(CollisionAlreadyResolved):
        decide(uow, ResolveCollision(SHOE, gen, shared, "b"))
    # The approval made before the resolution named an older revision.
    with pytest.raises(StaleRevision):
        decide(uow, ActivateGeneration(SHOE, gen, revision))
    assert gen_row(uow, gen).revision == revision + 1

    approved = approve(uow, gen)
    row = gen_row(uow, gen)
    assert row.status == "active" and row.activation_decision_id == approved.decision_id
    assert row.activated_at is not None
    assert find(uow, gen, shared) == "a"
    assert find(uow, gen, h("acme", "x-2")) == "c"
    with uow() as u:
        (collision,) = repo.collisions(u.tx, row.key)
    assert collision.candidate_item_ids == ("a", "b")
    assert (collision.holder_item_id, collision.decision_id) == ("a", resolved.decision_id)


def test_activation_needs_a_human_decision(uow: UowFactory, clean_db: DatabaseSettings) -> None:
    add(uow, "c", brand="ACME", mpn="X-2")
    gen = new_generation(uow)
    before = counts(clean_db.resolver_dsn)
    with pytest.raises(HumanApprovalRequired) as raised:
        approve(uow, gen, actor_kind="rule")
    assert raised.value.code == "HUMAN_APPROVAL_REQUIRED"
    assert gen_row(uow, gen).status == "ready"
    assert counts(clean_db.resolver_dsn) == before


def test_activation_is_a_recorded_decision_with_its_event(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add(uow, "c", brand="ACME", mpn="X-2")
    gen = new_generation(uow)
    recorded = approve(uow, gen)
    assert [a.type for a in recorded.aggregates] == ["decision"]
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        values = [r[0] for r in conn.execute("SELECT value FROM outbox ORDER BY position")]
        actor_kind = conn.execute(
            "SELECT actor_kind FROM decision WHERE decision_id = %s", (recorded.decision_id,)
        ).fetchone()
    last = CODEC.decode_value(values[-1])
    assert isinstance(last.payload, DecisionRecorded) and last.payload.actor_kind == "human"
    assert actor_kind == ("human",)
    assert_contiguous_outbox(clean_db.resolver_dsn)
    with pytest.raises(GenerationNotReady) as raised:
        approve(uow, gen)
    assert raised.value.code == "GENERATION_NOT_READY"


def test_generations_coexist_and_replays_use_the_pinned_one(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add(uow, "a", brand="ACME", mpn="X-1", gtin=EAN13)
    add(uow, "c", brand="ACME", mpn="X-2", gtin=OTHER_EAN13)
    first = new_generation(uow)
    approve(uow, first)
    second = new_generation(uow, GTIN_RULE)
    # The same items hold keys in both generations at once.
    assert find(uow, first, h("acme", "x-1")) == "a"
    by_gtin = identity_hash(GTIN_RULE, {"gtin": EAN13})
    assert by_gtin is not None
    assert find(uow, second, by_gtin) is None  # ready, not yet served
    approve(uow, second)

    one, two = gen_row(uow, first), gen_row(uow, second)
    assert (one.status, two.status) == ("retired", "active")
    assert one.retired_at == two.activated_at
    assert two.activated_at is not None and one.activated_at is not None
    # A replay pinned to the retired generation still finds its item; the active one
    # answers by its own rule. Neither answers the other's hash.
    assert find(uow, first, h("acme", "x-1")) == "a"
    assert find(uow, second, by_gtin) == "a"
    assert find(uow, second, h("acme", "x-1")) is None
    assert find(uow, first, by_gtin) is None
    with uow() as u:
        before = pinned_generation(u.tx, T, C, SHOE, one.activated_at - timedelta(seconds=1))
        during = pinned_generation(u.tx, T, C, SHOE, one.activated_at + timedelta(microseconds=1))
        after = pinned_generation(u.tx, T, C, SHOE, two.activated_at)
        now = pinned_generation(u.tx, T, C, SHOE, datetime.now(UTC) + timedelta(days=1))
        other_class = pinned_generation(u.tx, T, C, "boot", two.activated_at)
    assert before is None and other_class is None
    assert during is not None and (during.generation, during.status) == (first, "retired")
    assert during.rule == BRAND_MPN
    assert after is not None and after.generation == second and after.rule == GTIN_RULE
    assert now == after


def test_lookup_joins_on_all_five_columns(uow: UowFactory, clean_db: DatabaseSettings) -> None:
    add(uow, "c", brand="ACME", mpn="X-2")
    add(uow, "boot", class_id="boot", brand="ACME", mpn="X-2")
    add(uow, "c2", catalog="c2", brand="ACME", mpn="X-2")
    for class_id in (SHOE, "boot"):
        gen = new_generation(uow, class_id=class_id)
        approve(uow, gen, class_id=class_id)
    digest = h("acme", "x-2")
    with uow() as u:
        assert lookup_item(u.tx, T, C, SHOE, 1, digest) == "c"
        assert lookup_item(u.tx, T, C, "boot", 1, digest) == "boot"
        assert lookup_item(u.tx, T, C, SHOE, 2, digest) is None
        assert lookup_item(u.tx, T, "c2", SHOE, 1, digest) is None
        assert lookup_item(u.tx, "t2", C, SHOE, 1, digest) is None
        assert lookup_item(u.tx, T, C, SHOE, 1, h("acme", "x-3")) is None
        with pytest.raises(InvalidIdentity):
            lookup_item(u.tx, T, C, SHOE, 1, "not-a-hash")


def test_strong_identifiers_narrow_but_never_match_alone(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add(uow, "a", brand="ACME", mpn="X-1", gtin=EAN13)
    add(uow, "c", brand="ACME", mpn="X-2")
    add(uow, "e", brand="ACME", mpn="X-3", gtin=OTHER_EAN13)
    gen = new_generation(uow)
    approve(uow, gen)
    assert find(uow, gen, h("acme", "x-1"), ean=EAN13) == "a"
    assert find(uow, gen, h("acme", "x-1"), gtin="0" + EAN13) == "a"
    # The holder carries another GTIN: no match.
    assert find(uow, gen, h("acme", "x-1"), gtin=OTHER_EAN13) is None
    # The holder carries none, but another item carries the claimed one: no match.
    assert find(uow, gen, h("acme", "x-2"), gtin=OTHER_EAN13) is None
    assert find(uow, gen, h("acme", "x-2"), gtin=EAN13) is None
    # Unknown to every item, or unusable: it narrows nothing.
    assert find(uow, gen, h("acme", "x-2"), gtin="96385074") == "c"
    assert find(uow, gen, h("acme", "x-2"), gtin="garbage") == "c"
    # A strong identifier without the key never matches.
    assert find(uow, gen, h("nobody", "x-9"), gtin=EAN13) is None
    with uow() as u:
        found = lookup(u.tx, T, C, SHOE, gen, h("acme", "x-1"), {"upc": OTHER_EAN13})
    assert (found.outcome, found.item_id, found.conflicts) == ("strong_id_conflict", "a", ("gtin",))


# --- assignment, the unique constraint, release ---------------------------------------


def test_assigning_a_held_hash_is_an_identity_conflict(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add(uow, "c", brand="ACME", mpn="X-2")
    gen = new_generation(uow)
    approve(uow, gen)
    add(uow, "n1")
    before = counts(clean_db.resolver_dsn)
    with pytest.raises(IdentityConflict) as raised:
        decide(uow, AssignIdentity("n1", SHOE, gen, h("acme", "x-2")))
    assert raised.value.code == "IDENTITY_CONFLICT" and raised.value.http_status == 409
    assert counts(clean_db.resolver_dsn) == before
    with pytest.raises(IdentityConflict):  # c already holds a key in this generation
        decide(uow, AssignIdentity("c", SHOE, gen, h("acme", "x-9")))

    decide(uow, AssignIdentity("n1", SHOE, gen, h("acme", "n-1"), {"EAN": EAN13}))
    assert find(uow, gen, h("acme", "n-1")) == "n1"
    assert find(uow, gen, h("acme", "n-1"), gtin=EAN13) == "n1"
    add(uow, "n2")
    with pytest.raises(InvalidIdentity):  # an unusable strong identifier
        decide(uow, AssignIdentity("n2", SHOE, gen, h("acme", "n-2"), {"gtin": "bad"}))
    decide(uow, AssignIdentity("n2", SHOE, gen, h("acme", "n-2"), {"gtin": OTHER_EAN13}))
    with pytest.raises(StrongIdMismatch) as mismatch:  # n2's key is taken anyway,
        # but the strong identifier is checked first and differs
        decide(uow, AssignIdentity("n2", SHOE, gen, h("acme", "n-9"), {"gtin": EAN13}))
    assert mismatch.value.code == "STRONG_ID_MISMATCH"
    add(uow, "boot", class_id="boot")
    with pytest.raises(InvalidIdentity):  # a boot cannot hold a shoe's key
        decide(uow, AssignIdentity("boot", SHOE, gen, h("acme", "n-3")))


def test_assignment_needs_an_active_generation_and_item(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add(uow, "c", brand="ACME", mpn="X-2")
    gen = new_generation(uow)
    add(uow, "n1")
    with pytest.raises(GenerationNotActive):
        decide(uow, AssignIdentity("n1", SHOE, gen, h("acme", "n-1")))
    with pytest.raises(GenerationNotFound):
        decide(uow, AssignIdentity("n1", SHOE, gen + 1, h("acme", "n-1")))
    approve(uow, gen)
    decide(uow, RetireItem("n1", "gone"))
    with pytest.raises(TargetNotActive):
        decide(uow, AssignIdentity("n1", SHOE, gen, h("acme", "n-1")))


def test_the_unique_index_refuses_a_second_ready_or_active_key(
    clean_db: DatabaseSettings, uow: UowFactory
) -> None:
    """Straight SQL, past every domain check: PostgreSQL itself keeps INV-02."""
    add(uow, "a", brand="ACME", mpn="X-1")
    add(uow, "b", brand="ACME", mpn="X-1")
    add(uow, "c", brand="ACME", mpn="X-2")
    gen = new_generation(uow)
    shared, alone = h("acme", "x-1"), h("acme", "x-2")
    insert = (
        "INSERT INTO identity_key (tenant_id, catalog_id, class_id, identity_generation,"
        " item_id, identity_hash, state) VALUES ('t1', 'c1', 'shoe', %s, %s, %s, %s)"
    )
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        for state in ("ready", "active"):
            with pytest.raises(psycopg.errors.UniqueViolation), conn.transaction():
                conn.execute(insert, (gen, "a", alone, state))
        # Retired and released keys do not count; candidates live elsewhere.
        with conn.transaction(force_rollback=True):
            conn.execute(insert, (gen, "a", alone, "released"))
        # Two candidates share the hash; the key table has no row for it.
        candidates = conn.execute(
            "SELECT count(*) FROM identity_candidate WHERE identity_hash = %s", (shared,)
        ).fetchone()
        keys = conn.execute(
            "SELECT count(*) FROM identity_key WHERE identity_hash = %s", (shared,)
        ).fetchone()
    assert (candidates, keys) == ((2,), (0,))


def test_release_frees_the_hash_for_another_item(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add(uow, "c", brand="ACME", mpn="X-2")
    gen = new_generation(uow)
    approve(uow, gen)
    decide(uow, RetireItem("c", "replaced"), ReleaseIdentity("c"))
    assert find(uow, gen, h("acme", "x-2")) is None
    add(uow, "c-new", brand="ACME", mpn="X-2")
    decide(uow, AssignIdentity("c-new", SHOE, gen, h("acme", "x-2")))
    assert find(uow, gen, h("acme", "x-2")) == "c-new"


def test_retiring_or_splitting_an_item_releases_its_keys_in_the_same_decision(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    """A retired or split item is no longer the active holder of its hash (INV-02),
    so the hash is free for another item without an explicit ReleaseIdentity."""
    add(uow, "c", brand="ACME", mpn="X-2")
    add(uow, "s", brand="ACME", mpn="X-3")
    gen = new_generation(uow)
    approve(uow, gen)
    assert find(uow, gen, h("acme", "x-2")) == "c"
    assert find(uow, gen, h("acme", "x-3")) == "s"

    decide(uow, RetireItem("c", "replaced"))
    decide(uow, SplitItem("s", (Successor("s-1", "left"), Successor("s-2", "right"))))
    assert find(uow, gen, h("acme", "x-2")) is None
    assert find(uow, gen, h("acme", "x-3")) is None
    decide(uow, AssignIdentity("s-1", SHOE, gen, h("acme", "x-3")))
    assert find(uow, gen, h("acme", "x-3")) == "s-1"


def test_an_activated_generation_keeps_its_keys(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add(uow, "c", brand="ACME", mpn="X-2")
    gen = new_generation(uow)
    approve(uow, gen)
    with uow() as u, pytest.raises(GenerationAlreadyActivated):
        backfill_generation(u, T, C, SHOE, gen)
    # Even the application role cannot delete a served key: the trigger refuses.
    with uow() as u, pytest.raises(psycopg.errors.RestrictViolation):
        u.tx.execute("DELETE FROM identity_key")
    # Nor can two generations be active at once, even written by hand.
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        second = new_generation(uow)
        with pytest.raises(psycopg.errors.ExclusionViolation):
            conn.execute(
                "UPDATE identity_generation SET status = 'active', activated_at = now(),"
                " activation_decision_id = (SELECT decision_id FROM decision LIMIT 1)"
                " WHERE identity_generation = %s",
                (second,),
            )


# --- staleness and recovery ------------------------------------------------------------


def test_items_changed_after_the_backfill_make_it_stale_until_it_runs_again(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add(uow, "c", brand="ACME", mpn="X-2")
    gen = new_generation(uow)
    add(uow, "late", brand="ACME", mpn="X-3")
    with pytest.raises(BackfillStale) as raised:
        approve(uow, gen)
    assert raised.value.code == "BACKFILL_STALE"
    with uow() as u:
        backfill_generation(u, T, C, SHOE, gen)
    # An item changed after the backfill makes it stale too.
    decide(uow, ItemChange(T, C, "c", SHOE, "c", None, {"brand": "ACME", "mpn": "X-9"}))
    with pytest.raises(BackfillStale):
        approve(uow, gen)
    # Retiring it releases its ready key in the same decision, which leaves the
    # backfill consistent with the active items again.
    decide(uow, RetireItem("c", "gone"))
    with uow() as u:
        report = backfill_generation(u, T, C, SHOE, gen)
    assert (report.item_count, report.key_count) == (1, 1)
    approve(uow, gen)
    assert find(uow, gen, h("acme", "x-3")) == "late"
    assert find(uow, gen, h("acme", "x-2")) is None


def test_a_rerun_backfill_replaces_collisions_and_their_resolutions(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add(uow, "a", brand="ACME", mpn="X-1")
    add(uow, "b", brand="ACME", mpn="X-1")
    gen = new_generation(uow)
    decide(uow, ResolveCollision(SHOE, gen, h("acme", "x-1"), "a"))
    with uow() as u:
        report = backfill_generation(u, T, C, SHOE, gen)
    assert report.collision_count == 1
    with pytest.raises(UnresolvedCollisions):
        approve(uow, gen)
    decide(uow, ResolveCollision(SHOE, gen, h("acme", "x-1"), None))
    approve(uow, gen)
    # Resolved to no holder: neither candidate is served.
    assert find(uow, gen, h("acme", "x-1")) is None


def test_a_crash_between_create_and_backfill_leaves_a_generation_to_backfill(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add(uow, "c", brand="ACME", mpn="X-2")

    def crash_backfill() -> UnitOfWork:
        raise ConnectionError("process killed between create and backfill")

    made: list[UnitOfWork] = []

    def factory() -> UnitOfWork:
        if made:
            return crash_backfill()
        made.append(uow())
        return made[0]

    with pytest.raises(ConnectionError):
        create_and_backfill(factory, T, C, SHOE, BRAND_MPN)
    row = gen_row(uow, 1)
    assert (row.status, row.backfilled_at, row.item_count) == ("backfilling", None, None)
    with pytest.raises(BackfillIncomplete):
        decide(uow, ActivateGeneration(SHOE, 1, row.revision))
    with uow() as u:
        backfill_generation(u, T, C, SHOE, 1)
    approve(uow, 1)
    assert find(uow, 1, h("acme", "x-2")) == "c"


@pytest.mark.parametrize("fail_at", ["insert_collisions", "mark_backfilled"])
def test_a_crash_inside_a_backfill_leaves_the_previous_run(
    uow: UowFactory, clean_db: DatabaseSettings, monkeypatch: pytest.MonkeyPatch, fail_at: str
) -> None:
    add(uow, "a", brand="ACME", mpn="X-1")
    add(uow, "b", brand="ACME", mpn="X-1")
    add(uow, "c", brand="ACME", mpn="X-2")
    gen = new_generation(uow)
    before = gen_row(uow, gen)
    add(uow, "late", brand="ACME", mpn="X-3")

    def crash(*_args: object) -> None:
        raise ConnectionError(f"killed at {fail_at}")

    monkeypatch.setattr(repo, fail_at, crash)
    with uow() as u, pytest.raises(ConnectionError):
        backfill_generation(u, T, C, SHOE, gen)
    monkeypatch.undo()
    assert gen_row(uow, gen) == before
    with uow() as u:
        assert repo.keys_by_item(u.tx, before.key) == {"c": h("acme", "x-2")}
        assert set(repo.candidates_by_item(u.tx, before.key)) == {"a", "b"}


def test_concurrent_creations_of_one_class_get_distinct_numbers_or_a_conflict(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    def create() -> int:
        with uow() as u:
            return create_generation(u, T, C, SHOE, BRAND_MPN).key.generation

    numbers: list[int] = []
    for _ in range(ROUNDS):
        outcomes = race(create, create)
        for outcome in outcomes:
            if isinstance(outcome, DomainError):
                assert outcome.code == "GENERATION_CONFLICT"
            else:
                assert isinstance(outcome, int)
                numbers.append(outcome)
    assert sorted(numbers) == list(range(1, len(numbers) + 1))


# --- races -----------------------------------------------------------------------------


def _active_generation(uow: UowFactory) -> int:
    add(uow, "c", brand="ACME", mpn="X-2")
    gen = new_generation(uow)
    approve(uow, gen)
    return gen


def assign_without_cursor(uow: UowFactory, item_id: str, gen: int, digest: str) -> None:
    """A writer that skips ``record_decision`` and the stream's cursor lock: only the
    database's constraints and row locks stand between it and the others."""
    with uow() as u:
        decision_id = uuid.uuid4()
        u.tx.execute(
            "INSERT INTO decision (tenant_id, catalog_id, decision_id, action, actor,"
            " actor_kind, rationale, evidence) VALUES (%s, %s, %s, 'identity', 'rogue',"
            ' \'rule\', \'r\', \'[{"capture_id": "x", "locator": "y"}]\')',
            (T, C, decision_id),
        )
        AssignIdentity(item_id, SHOE, gen, digest).accept(u, DecisionScope(T, C, decision_id))
        u.commit()


def _one_holder_per_round(
    uow: UowFactory, dsn: str, writers: Callable[[int, int], list[Callable[[], object]]]
) -> None:
    gen = _active_generation(uow)
    for n in range(ROUNDS):
        add(uow, f"x{n}")
        add(uow, f"y{n}")
        outcomes = race(*writers(n, gen))
        conflicts = [o for o in outcomes if isinstance(o, IdentityConflict)]
        assert len(conflicts) == 1, outcomes
        assert all(o is None or isinstance(o, Recorded | IdentityConflict) for o in outcomes)
        holder = find(uow, gen, h("race", str(n)))
        assert holder in (f"x{n}", f"y{n}")
    with psycopg.connect(dsn) as conn:
        per_hash = conn.execute(
            "SELECT identity_hash, count(*) FROM identity_key WHERE state = 'active'"
            " GROUP BY identity_hash HAVING count(*) > 1"
        ).fetchall()
    assert per_hash == []
    assert_contiguous_outbox(dsn)


def test_two_decisions_assigning_one_hash_in_one_stream_one_wins(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    _one_holder_per_round(
        uow,
        clean_db.resolver_dsn,
        lambda n, gen: [
            lambda item=item: decide(uow, AssignIdentity(item, SHOE, gen, h("race", str(n))))
            for item in (f"x{n}", f"y{n}")
        ],
    )


def test_a_writer_skipping_the_cursor_lock_still_meets_the_unique_index(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    _one_holder_per_round(
        uow,
        clean_db.resolver_dsn,
        lambda n, gen: [
            lambda: decide(uow, AssignIdentity(f"x{n}", SHOE, gen, h("race", str(n)))),
            lambda: assign_without_cursor(uow, f"y{n}", gen, h("race", str(n))),
        ],
    )


def test_an_assignment_racing_the_next_activation_never_stays_active_in_a_retired_one(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    """The assignment holds the old generation FOR SHARE, the activation takes it FOR
    UPDATE: the key either lands first and is retired with it, or is refused."""
    add(uow, "c", brand="ACME", mpn="X-2")
    for n in range(ROUNDS):
        old = new_generation(uow)
        approve(uow, old)
        add(uow, f"x{n}")
        new = new_generation(uow)
        # Give the activation's freshness check nothing to trip on: x{n} has no
        # brand or mpn, so it holds no key under the rule in either backfill.
        assigned, approved = race(
            lambda n=n, old=old: assign_without_cursor(uow, f"x{n}", old, h("race", str(n))),
            lambda new=new: approve(uow, new),
        )
        assert isinstance(approved, Recorded), approved
        assert assigned is None or isinstance(assigned, GenerationNotActive), assigned
        with uow() as u:
            state = repo.item_key(u.tx, GenerationKey(T, C, SHOE, old), f"x{n}")
        assert state in (None, (h("race", str(n)), "retired")), state
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        misplaced = conn.execute(
            "SELECT count(*) FROM identity_key k JOIN identity_generation g"
            " USING (tenant_id, catalog_id, class_id, identity_generation)"
            " WHERE g.status = 'retired' AND k.state IN ('ready', 'active')"
        ).fetchone()
    assert misplaced == (0,)


def test_a_backfill_partitions_every_class_into_keys_candidates_and_unkeyed(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    """Random catalogs (few brands and part numbers, so hashes collide, some fields
    missing or blank): every active item of the class with an identity is exactly a
    key holder or a candidate of its hash, keys never share a hash, and a collision
    exists exactly for the hashes several items share."""
    rng = random.Random(20261201)
    brands = ["ACME", " acme", "Globex", "", None]
    mpns = ["X-1", "x-1 ", "X-2", "  ", None]
    for round_number in range(6):
        class_id = f"class-{round_number}"
        expected: dict[str, str] = {}
        for n in range(rng.randint(0, 25)):
            attributes = {}
            for name, choices in (("brand", brands), ("mpn", mpns)):
                value = rng.choice(choices)
                if value is not None:
                    attributes[name] = value
            item_id = f"{class_id}-i{n}"
            add(uow, item_id, class_id=class_id, **attributes)
            digest = identity_hash(BRAND_MPN, attributes)
            if rng.random() < 0.2:
                decide(uow, RetireItem(item_id, "gone"))
            elif digest is not None:
                expected[item_id] = digest
        report = create_and_backfill(uow, T, C, class_id, BRAND_MPN)
        with uow() as u:
            key = report.generation.key
            keys = repo.keys_by_item(u.tx, key)
            candidates = repo.candidates_by_item(u.tx, key)
            collisions = {c.identity_hash: c for c in repo.collisions(u.tx, key)}
        assert not set(keys) & set(candidates)
        assert {**keys, **candidates} == expected
        assert len(set(keys.values())) == len(keys)
        sharing: dict[str, list[str]] = {}
        for item_id, digest in expected.items():
            sharing.setdefault(digest, []).append(item_id)
        assert {d for d, ids in sharing.items() if len(ids) > 1} == set(collisions)
        for digest, collision in collisions.items():
            assert sorted(sharing[digest]) == list(collision.candidate_item_ids)
        assert report.key_count == len(keys) and report.collision_count == len(collisions)
