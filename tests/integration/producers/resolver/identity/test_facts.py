"""Identity keys (INV-02) against real PostgreSQL: assignment and release, the
unique key constraint, and the races it decides (also against a writer that skips the
cursor lock, and against the next activation)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import psycopg
import psycopg.errors
import pytest

from db.repositories import identity as repo
from db.repositories.identity import GenerationKey
from db.settings import DatabaseSettings
from producers.resolver.catalog_items import RetireItem
from producers.resolver.decisions import Recorded
from producers.resolver.exceptions import (
    GenerationNotActive,
    GenerationNotFound,
    IdentityConflict,
    InvalidIdentity,
    StrongIdMismatch,
    TargetNotActive,
)
from producers.resolver.facts import DecisionScope
from producers.resolver.identity.facts import AssignIdentity, ReleaseIdentity
from producers.resolver.splits import SplitItem, Successor
from tests.integration.producers.resolver.conftest import (
    UowFactory,
    assert_contiguous_outbox,
)
from tests.integration.producers.resolver.identity.conftest import (
    EAN13,
    OTHER_EAN13,
    SHOE,
    C,
    T,
    add,
    approve,
    counts,
    decide,
    find,
    h,
    new_generation,
)
from tests.integration.producers.resolver.test_races import ROUNDS, race

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
