"""Identity generations (INV-02) against real PostgreSQL: the lifecycle (backfill,
collisions, approval, retirement, pinning), what an activated generation keeps, and
the recovery of stale or interrupted backfills."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import psycopg
import psycopg.errors
import pytest

from db.repositories import identity as repo
from db.repositories import strong_ids as strong
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from producers.capture.adapters import CLAIM_FIELDS
from producers.resolver.catalog_items import ItemChange, RetireItem
from producers.resolver.exceptions import (
    BackfillIncomplete,
    BackfillStale,
    CollisionAlreadyResolved,
    DomainError,
    GenerationAlreadyActivated,
    GenerationNotReady,
    HumanApprovalRequired,
    InvalidCollisionResolution,
    StaleRevision,
    UnresolvedCollisions,
)
from producers.resolver.identity.facts import ActivateGeneration, ResolveCollision
from producers.resolver.identity.generations import (
    backfill_generation,
    create_and_backfill,
    create_generation,
    pinned_generation,
)
from producers.resolver.identity.rules import identity_hash
from schemas.codec import CODEC
from schemas.events import DecisionRecorded
from tests.integration.producers.resolver.conftest import (
    UowFactory,
    assert_contiguous_outbox,
)
from tests.integration.producers.resolver.identity.conftest import (
    BRAND_MPN,
    EAN13,
    GTIN_RULE,
    OTHER_EAN13,
    SHOE,
    C,
    T,
    add,
    approve,
    counts,
    decide,
    find,
    gen_row,
    h,
    new_generation,
    shoes,
)
from tests.integration.producers.resolver.test_races import ROUNDS, race

# --- lifecycle -----------------------------------------------------------------------


def test_backfill_keys_unique_hashes_and_keeps_shared_ones_as_candidates(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    shoes(uow)
    report = create_and_backfill(uow, T, C, SHOE, BRAND_MPN, CLAIM_FIELDS)
    assert (report.item_count, report.key_count, report.collision_count) == (4, 1, 1)
    assert report.unkeyed_item_count == 1
    row = report.generation
    assert (row.key.generation, row.status, row.revision) == (1, "ready", 2)
    assert row.rule_fields == ("brand", "mpn") and row.item_count == 4
    key = row.key
    with uow() as u:
        assert repo.keys_by_item(u.tx, key) == {"c": h("acme", "x-2")}
        assert repo.candidates_by_item(u.tx, key) == {"a": h("acme", "x-1"), "b": h("acme", "x-1")}
        assert strong.strong_ids(u.tx, T, C, "a") == {"gtin": "0" + EAN13}
    # Nothing is served before activation: not the ready key, not the candidates.
    assert find(uow, 1, h("acme", "x-2")) is None
    assert find(uow, 1, h("acme", "x-1")) is None
    # Identity work commits no events and takes no stream position (each add is a rule
    # decision: its own event and the item's).
    assert counts(clean_db.resolver_dsn)[1:] == (10, 10)


def test_activation_refused_while_backfilling(uow: UowFactory, clean_db: DatabaseSettings) -> None:
    add(uow, "c", brand="ACME", mpn="X-2")
    with uow() as u:
        create_generation(u, T, C, SHOE, BRAND_MPN, CLAIM_FIELDS)
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
        create_and_backfill(factory, T, C, SHOE, BRAND_MPN, CLAIM_FIELDS)
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
            return create_generation(u, T, C, SHOE, BRAND_MPN, CLAIM_FIELDS).key.generation

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
        report = create_and_backfill(uow, T, C, class_id, BRAND_MPN, CLAIM_FIELDS)
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
