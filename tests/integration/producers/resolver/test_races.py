"""Races between real transactions on real connections: exactly one outcome each."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime

import psycopg

from db.settings import DatabaseSettings
from producers.resolver.decisions import Decision, record_decision
from producers.resolver.exceptions import (
    OverlappingPolicyWindow,
    StaleRevision,
    TargetNotActive,
)
from producers.resolver.listing_mappings import MapListing
from producers.resolver.review_cases import CaseRevision, open_case
from producers.resolver.shipping_policies import VersionShippingPolicy
from schemas.codec import CODEC
from tests.integration.producers.resolver.conftest import (
    EVIDENCE,
    UowFactory,
    add_item,
    assert_contiguous_outbox,
    retire,
)

ROUNDS = 12


def race(*actions: Callable[[], object]) -> list[object]:
    """Start the actions together on their own threads; each returns or raises."""
    barrier = threading.Barrier(len(actions))
    outcomes: list[object] = [None] * len(actions)

    def run(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = actions[i]()
        except Exception as exc:  # the outcome under test
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(actions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def decision(*facts: object, catalog: str = "c1", case: CaseRevision | None = None) -> Decision:
    return Decision(
        tenant_id="t1",
        catalog_id=catalog,
        action="accept",
        actor="reviewer:ana",
        rationale="r",
        evidence=EVIDENCE,
        facts=facts,  # type: ignore[arg-type]
        case=case,
    )


def record(uow: UowFactory, d: Decision) -> object:
    with uow() as u:
        return record_decision(u, d)


def test_a_mapping_racing_a_retirement_never_targets_a_retired_item(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    outcomes = []
    for n in range(ROUNDS):
        add_item(uow, f"i{n}")
        mapped, retired = race(
            lambda n=n: record(uow, decision(MapListing(f"L{n}", f"i{n}"))),  # type: ignore[misc]
            lambda n=n: retire(uow, f"i{n}"),  # type: ignore[misc]
        )
        assert retired is None, retired
        assert not isinstance(mapped, Exception) or isinstance(mapped, TargetNotActive), mapped
        outcomes.append(isinstance(mapped, Exception))

    with psycopg.connect(clean_db.resolver_dsn) as conn:
        rows = conn.execute(
            "SELECT m.listing_id, m.item_revision, i.revision, i.status FROM listing_mapping m"
            " JOIN catalog_item i USING (tenant_id, catalog_id, item_id)"
        ).fetchall()
        # The mapping decisions (items are created and retired by rule decisions).
        decisions = conn.execute(
            "SELECT count(*) FROM decision WHERE actor = 'reviewer:ana'"
        ).fetchone()
        values = [r[0] for r in conn.execute("SELECT value FROM outbox ORDER BY position")]
    position = {(e.event_type, e.aggregate.id): e.position for e in map(CODEC.decode_value, values)}
    # A refused mapping left nothing behind; a mapping that exists committed before
    # the retirement and names the item's last active revision.
    assert len(rows) == outcomes.count(False)
    assert decisions == (outcomes.count(False),)
    for listing, mapped_revision, item_revision, status in rows:
        assert status == "retired"
        assert mapped_revision == item_revision - 1
        item = "i" + listing.removeprefix("L")
        assert (
            position[("listing_mapping.mapped", listing)] < position[("catalog_item.retired", item)]
        )
    assert_contiguous_outbox(clean_db.resolver_dsn)


def test_two_decisions_on_one_case_revision_one_wins(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    for n in range(ROUNDS):
        with uow() as u:
            open_case(u, "t1", "c1", f"case-{n}", "listing", f"L{n}")
            u.commit()
        outcomes = race(
            *[
                lambda n=n: record(uow, decision(case=CaseRevision(f"case-{n}", 1)))
                for _ in range(2)
            ]
        )
        stale = [o for o in outcomes if isinstance(o, StaleRevision)]
        assert len(stale) == 1, outcomes
        assert stale[0].code == "STALE_REVISION"
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        revisions = conn.execute("SELECT DISTINCT revision FROM review_case").fetchall()
        # The mapping decisions (items are created and retired by rule decisions).
        decisions = conn.execute(
            "SELECT count(*) FROM decision WHERE actor = 'reviewer:ana'"
        ).fetchone()
    assert revisions == [(2,)]
    assert decisions == (ROUNDS,)
    assert_contiguous_outbox(clean_db.resolver_dsn)


def test_overlapping_windows_from_two_streams_one_is_refused(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    """Two catalogs' writers hold different cursor locks and really run at once; the
    exclusion constraint (on tenant, policy and scope) still lets only one commit."""
    start = datetime(2027, 1, 1, tzinfo=UTC)
    for n in range(ROUNDS):
        outcomes = race(
            *[
                lambda c=c, n=n: record(
                    uow,
                    decision(VersionShippingPolicy(f"p{n}", "DE", start), catalog=c),
                )
                for c in ("c1", "c2")
            ]
        )
        refused = [o for o in outcomes if isinstance(o, OverlappingPolicyWindow)]
        assert len(refused) == 1, outcomes
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        versions = conn.execute("SELECT count(*) FROM shipping_policy_version").fetchone()
    assert versions == (ROUNDS,)
    assert_contiguous_outbox(clean_db.resolver_dsn)


def test_overlapping_windows_in_one_stream_one_is_refused(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    start = datetime(2027, 1, 1, tzinfo=UTC)
    for n in range(ROUNDS):
        outcomes = race(
            *[
                lambda n=n: record(uow, decision(VersionShippingPolicy(f"p{n}", "DE", start)))
                for _ in range(2)
            ]
        )
        assert len([o for o in outcomes if isinstance(o, OverlappingPolicyWindow)]) == 1
    assert_contiguous_outbox(clean_db.resolver_dsn)
