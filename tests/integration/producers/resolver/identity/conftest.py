"""Helpers of the identity tests: a shoe catalog's items, decisions on its
generations, lookups, and counts of what a refusal must leave unchanged."""

from __future__ import annotations

import psycopg
import psycopg.errors

from db.repositories import identity as repo
from db.repositories.identity import GenerationKey
from producers.capture.adapters import CLAIM_FIELDS
from producers.resolver.catalog_items import ItemChange
from producers.resolver.decisions import Decision, Recorded, record_decision
from producers.resolver.identity.facts import ActivateGeneration
from producers.resolver.identity.generations import create_and_backfill
from producers.resolver.identity.lookups import lookup_item
from producers.resolver.identity.rules import IdentityRule, identity_hash
from tests.fixtures.decisions import accept
from tests.integration.producers.resolver.conftest import (
    EVIDENCE,
    UowFactory,
)

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
    report = create_and_backfill(uow, T, C, class_id, rule, CLAIM_FIELDS)
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
