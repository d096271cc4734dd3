"""From an extracted product to a plan: an automatic decision, nothing to do, or a
review case.

``identify`` answers which catalog item the product is (an existing one, a new one
with the facts that give it its identity, or no automatic answer, with the reason);
``plan`` turns that into the decision's facts. Both only read: settling writes the
plan (``producers.capture.worker.settling``), in the product's Unit of Work, after the
stream's cursor lock is taken.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from db.repositories import identity as identity_rows
from db.repositories import identity_pins
from db.repositories.capture_items import ResultKey
from db.repositories.identity import GenerationKey
from db.unit_of_work import Transaction, UnitOfWork
from producers.capture.adapters import ExtractedProduct
from producers.capture.worker.reads import (
    CatalogReads,
    Read,
    holders_read,
    item_read,
    key_read,
    mapping_read,
    source_item_read,
    strong_read,
)
from producers.resolver.catalog_items import ItemChange
from producers.resolver.decisions import Decision
from producers.resolver.facts import Fact
from producers.resolver.identity import (
    AssignIdentity,
    Generation,
    identity_hash,
    lookup_with,
    pinned_generation,
    strong_ids_of,
)
from producers.resolver.identity.facts import remember_share_locked
from producers.resolver.listing_mappings import MapListing
from schemas.events import EvidenceRef

ACTION = "capture.resolve"
ACTOR = "resolver-worker"

# Fixed namespaces of the worker's name-based ids (new items; decisions and review
# cases); never change them, or a replay would create the same things again under
# other ids.
_ITEM_NAMESPACE = uuid.UUID("5d0e9a61-2b8f-4c53-a7e4-91f3c02b6d18")
_NAMESPACE = uuid.UUID("0c6f4e52-7d1b-4a4e-9b7a-3f2d8e61c5a9")


def result_uuid(key: ResultKey, purpose: str) -> uuid.UUID:
    """A name-based id of one result's decision (or case): the same on every replay."""
    name = json.dumps(
        [purpose, key.tenant_id, str(key.capture_id), key.source_item_id, key.parser_version]
    )
    return uuid.uuid5(_NAMESPACE, name)


@dataclass(frozen=True, slots=True)
class ItemWork:
    """One product to resolve, with everything about its capture it may need."""

    key: ResultKey
    tenant_id: str
    catalog_id: str
    source: str
    capture_id: uuid.UUID
    captured_at: datetime
    arrived_at: datetime  # the capture's created_at: identity generations pin to it
    product: ExtractedProduct

    @property
    def decision_id(self) -> uuid.UUID:
        return result_uuid(self.key, "decision")

    @property
    def case_id(self) -> str:
        return f"capture-{result_uuid(self.key, 'case')}"

    @property
    def listing_id(self) -> str:
        return f"{self.source}:{self.product.source_item_id}"


@dataclass(frozen=True, slots=True)
class CaseToOpen:
    """A review case to open, and why (a stable ``code`` and a message); the result
    keeps the why."""

    subject_type: str
    subject_id: str
    code: str
    reason: str


@dataclass(frozen=True, slots=True)
class Plan:
    """What resolution decided for one product.

    ``applied``: record ``decision`` (its facts name ``item_id``); ``unchanged``: the
    catalog already says this about ``item_id``; ``review``: open ``case``.
    """

    outcome: str
    item_id: str | None = None
    decision: Decision | None = None
    case: CaseToOpen | None = None

    def __post_init__(self) -> None:
        expected = {"applied": "decision", "unchanged": None, "review": "case"}
        if self.outcome not in expected:
            raise ValueError(f"a plan cannot end {self.outcome!r}")
        if (self.decision is not None) != (self.outcome == "applied"):
            raise ValueError("exactly an applied plan carries a decision")
        if (self.case is not None) != (self.outcome == "review"):
            raise ValueError("exactly a review plan carries a case")
        if self.outcome != "review" and self.item_id is None:
            raise ValueError(f"an {self.outcome} plan names its item")


# Resolve one product into a plan. Runs inside the product's Unit of Work after the
# stream's cursor lock is taken; reads only (settling writes).
Resolve = Callable[[UnitOfWork, ItemWork], Plan]


@dataclass(frozen=True, slots=True)
class Identified:
    """The product is catalog item ``item_id``; ``new``: it does not exist yet, and
    ``facts`` (e.g. its identity key) go into the decision that creates it."""

    item_id: str
    new: bool
    facts: tuple[Fact, ...] = ()


@dataclass(frozen=True, slots=True)
class Unresolved:
    """No automatic answer: a reviewer decides. ``code`` is stable."""

    code: str
    reason: str


Identify = Callable[[UnitOfWork, ItemWork], Identified | Unresolved]


def claimed_values(work: ItemWork) -> dict[str, str]:
    """The values an identity rule may name: the title, the attributes and the
    identifiers (an identifier wins over an attribute of the same name)."""
    p = work.product
    return {"title": p.title, **p.attributes, **p.identifiers}


def new_item_id(catalog_id: str, class_id: str, generation: int, digest: str) -> str:
    """The id of the item a key creates: the same on every replay of any capture."""
    name = json.dumps([catalog_id, class_id, generation, digest])
    return f"item-{uuid.uuid5(_ITEM_NAMESPACE, name)}"


def _pinned(tx: Transaction, work: ItemWork) -> Generation | None:
    """The generation the capture's class is pinned to: the one active at its arrival,
    recorded the first time and read back ever after (``capture_identity_pin``)."""
    klass = work.product.class_id
    held = identity_pins.get(tx, work.tenant_id, work.capture_id, klass)
    if held is None:
        at_arrival = pinned_generation(tx, work.tenant_id, work.catalog_id, klass, work.arrived_at)
        number = at_arrival.generation if at_arrival else None
        held = identity_pins.pin(
            tx, work.tenant_id, work.capture_id, work.catalog_id, klass, number
        )
        if at_arrival is not None and held.generation == number:
            return at_arrival
    if held.generation is None:
        return None
    row = identity_rows.get_generation(
        tx, GenerationKey(work.tenant_id, work.catalog_id, klass, held.generation)
    )
    assert row is not None  # generations are never deleted
    return Generation.of(row)


def _pin_memo(work: ItemWork, class_id: str) -> tuple[object, ...]:
    return ("identity_pin", work.tenant_id, work.capture_id, class_id)


def pinned(uow: UnitOfWork, work: ItemWork) -> Generation | None:
    """``_pinned``, read once per transaction for each capture and class
    (``UnitOfWork.memo``; ``_load_pins`` for a batch): after the stream's cursor lock,
    no other writer can activate or retire a generation of the catalog until the
    transaction ends, and a pin, once there, never changes."""
    key = _pin_memo(work, work.product.class_id)
    if key not in uow.memo:
        uow.memo[key] = _pinned(uow.tx, work)
    found: Generation | None = uow.memo[key]
    return found


def _load_pins(uow: UnitOfWork, works: Sequence[ItemWork]) -> None:
    """``pinned`` for every class of ``works`` (one capture) already pinned, in one
    statement a batch instead of two a class; each generation is share-locked as
    ``assign_identity`` locks the one it writes a key in, and recorded so (a batch
    of known products holds that lock until it commits, which only delays the next
    generation's activation). A class not pinned yet is left to ``pinned``. Only a
    read: a crash or rollback leaves nothing, the locks going with the transaction."""
    first = works[0]
    classes = {w.product.class_id for w in works}
    missing = sorted(k for k in classes if _pin_memo(first, k) not in uow.memo)
    if not missing:
        return
    rows = identity_rows.pinned_for_share(
        uow.tx, first.tenant_id, first.catalog_id, first.capture_id, missing
    )
    for klass, row in rows.items():
        uow.memo[_pin_memo(first, klass)] = Generation.of(row)
        remember_share_locked(uow, row)


@dataclass(frozen=True, slots=True)
class _Claims:
    """What a product claims, as one generation's rule reads it: its identity hash
    (None: the product lacks a field of the rule), its strong identifiers, and the
    id of the item a new key would create."""

    values: dict[str, str]
    digest: str | None
    strong: dict[str, str]
    new_item: str | None


def _claims(uow: UnitOfWork, work: ItemWork, generation: Generation) -> _Claims:
    """``_Claims`` of ``work`` under ``generation``, worked out once per transaction
    (``prefetch`` needs them, and then ``identify``)."""
    memo = ("claims", work.key, generation.class_id, generation.generation)
    found = uow.memo.get(memo)
    if isinstance(found, _Claims):
        return found
    values = claimed_values(work)
    digest = identity_hash(generation.rule, values)
    item = None
    if digest is not None:
        item = new_item_id(work.catalog_id, generation.class_id, generation.generation, digest)
    made = uow.memo[memo] = _Claims(values, digest, strong_ids_of(values), item)
    return made


def identify(uow: UnitOfWork, work: ItemWork) -> Identified | Unresolved:
    """Which item the product is, by identity (INV-02), in the generation of its class
    that was active when the capture arrived (its ``created_at``: the resolver's own
    clock, where ``captured_at`` is the collector's), pinned per capture and class on
    first use so every retry and replay resolves in the same generation.

    - no generation then, or claims without the rule's fields: review;
    - the key's holder, unless the claimed strong identifiers contradict it: review;
    - no key: a new item holding the key, unless a strong identifier it claims
      already belongs to another item (review), or the pinned generation has been
      retired since (keys go to the active one: review).
    """
    p = work.product
    reads = CatalogReads.of(uow)
    generation = pinned(uow, work)
    if generation is None:
        return Unresolved(
            "NO_ACTIVE_GENERATION",
            f"class {p.class_id!r} had no active identity generation when the capture arrived",
        )
    claims = _claims(uow, work, generation)
    digest = claims.digest
    if digest is None:
        return Unresolved(
            "NO_IDENTITY",
            f"the product does not state every field of the identity rule {generation.rule.fields}",
        )
    strong = claims.strong
    found = lookup_with(
        reads, work.tenant_id, work.catalog_id, p.class_id, generation.generation, digest, strong
    )
    if found.outcome == "match":
        assert found.item_id is not None
        return Identified(found.item_id, new=False)
    if found.outcome == "strong_id_conflict":
        return Unresolved(
            "STRONG_ID_CONFLICT",
            f"the product's identity matches {found.item_id!r} but its {', '.join(found.conflicts)}"
            " contradicts it",
        )
    for scheme, value in sorted(strong.items()):
        holders = reads.strong_id_holders(work.tenant_id, work.catalog_id, scheme, value)
        if holders:
            return Unresolved(
                "STRONG_ID_HELD",
                f"no item has the product's identity, but its {scheme} {value} belongs to"
                f" {', '.join(holders)}",
            )
    if generation.status != "active":
        return Unresolved(
            "GENERATION_RETIRED",
            f"the product is new to generation {generation.generation} of {p.class_id!r}, which"
            " has been retired since the capture arrived",
        )
    item_id = claims.new_item
    assert item_id is not None  # with a digest
    assign = AssignIdentity(item_id, p.class_id, generation.generation, digest, strong)
    return Identified(item_id, new=True, facts=(assign,))


def item_attributes(work: ItemWork) -> dict[str, str]:
    """What the product states about the item itself: its identifiers and attributes
    (the offer belongs to the listing and stays in the claims)."""
    return {**work.product.identifiers, **work.product.attributes}


def planner(identify: Identify) -> Resolve:
    def resolve(uow: UnitOfWork, work: ItemWork) -> Plan:
        return plan(uow, work, identify(uow, work))

    return resolve


def plan(uow: UnitOfWork, work: ItemWork, answer: Identified | Unresolved) -> Plan:
    """The plan for ``work`` given the identity answer.

    - unresolved: a review case on the listing;
    - a new item: create it (with the identity facts) and map the listing onto it;
    - an existing active item: a new revision when the product adds or changes
      anything (a source never removes attributes other sources stated), and the
      listing mapped when it is not yet; ``unchanged`` when the catalog already says
      all of it. A listing mapped onto another item, or an item no longer active,
      is for a reviewer.
    """
    p = work.product
    if isinstance(answer, Unresolved):
        return _review(work, answer.code, answer.reason)
    stated = item_attributes(work)
    facts: list[Fact] = []
    reads = CatalogReads.of(uow)
    current = reads.item(work.tenant_id, work.catalog_id, answer.item_id)
    if current is not None and current.status != "active":
        # A new identity's item id is derived from its hash, so a product whose item
        # was retired or split (releasing its key) names that item again.
        return _review(
            work,
            "ITEM_NOT_ACTIVE",
            f"the product identifies item {answer.item_id!r}, which is {current.status}",
        )
    mapping = reads.mapping(work.tenant_id, work.catalog_id, work.listing_id)
    if mapping is not None and mapping.item_id != answer.item_id:
        return _review(
            work,
            "LISTING_MAPPED_ELSEWHERE",
            f"listing {work.listing_id!r} is mapped to {mapping.item_id!r}; the product now"
            f" identifies {answer.item_id!r}",
        )
    if answer.new and current is None:
        facts.append(
            ItemChange(
                work.tenant_id, work.catalog_id, answer.item_id, p.class_id, p.title, None, stated
            )
        )
        facts.extend(answer.facts)
        facts.append(MapListing(work.listing_id, answer.item_id))
        return _applied(work, answer.item_id, facts, "a new item")
    if current is None:
        return _review(
            work,
            "ITEM_NOT_ACTIVE",
            f"the product identifies item {answer.item_id!r}, which is missing",
        )
    merged = {**current.attributes, **stated}
    if (current.class_id, current.title, current.attributes) != (p.class_id, p.title, merged):
        facts.append(
            ItemChange(
                work.tenant_id,
                work.catalog_id,
                answer.item_id,
                p.class_id,
                p.title,
                current.parent_item_id,
                merged,
            )
        )
    if mapping is None:
        facts.append(MapListing(work.listing_id, answer.item_id))
    if not facts:
        return Plan("unchanged", item_id=answer.item_id)
    return _applied(work, answer.item_id, facts, "a known item")


def _applied(work: ItemWork, item_id: str, facts: list[Fact], what: str) -> Plan:
    decision = Decision(
        tenant_id=work.tenant_id,
        catalog_id=work.catalog_id,
        action=ACTION,
        actor=ACTOR,
        actor_kind="rule",
        rationale=(
            f"source item {work.product.source_item_id!r} of capture {work.capture_id}"
            f" identified as {what}, {item_id!r}"
        ),
        evidence=(EvidenceRef(capture_id=str(work.capture_id), locator=work.product.locator),),
        facts=tuple(facts),
        decision_id=work.decision_id,
    )
    return Plan("applied", item_id=item_id, decision=decision)


def _review(work: ItemWork, code: str, reason: str) -> Plan:
    return Plan("review", case=CaseToOpen("listing", work.listing_id, code, reason))


def prefetch(uow: UnitOfWork, works: Sequence[ItemWork]) -> None:
    """Read ahead what resolving ``works`` (one tenant, catalog and source; no source
    item twice) will read, a statement for each kind of read (``CatalogReads``):
    after the stream's cursor lock, before the first of them is resolved."""
    if not works:
        return
    keys: list[tuple[str, int, str]] = []
    claimed: list[tuple[str, str]] = []
    new_items: list[str] = []
    _load_pins(uow, works)
    for work in works:
        generation = pinned(uow, work)
        if generation is None:
            continue
        claims = _claims(uow, work, generation)
        if claims.digest is None or claims.new_item is None:
            continue
        keys.append((work.product.class_id, generation.generation, claims.digest))
        claimed.extend(claims.strong.items())
        new_items.append(claims.new_item)
    first = works[0]
    CatalogReads.of(uow).load_batch(
        first.tenant_id,
        first.catalog_id,
        first.source,
        [w.product.source_item_id for w in works],
        sorted(set(keys)),
        sorted(set(claimed)),
        [w.listing_id for w in works],
        new_items,
    )


def written_by(work: ItemWork, plan: Plan) -> set[Read] | None:
    """What settling ``work`` by ``plan`` writes of what ``CatalogReads`` reads (None:
    a fact of a kind not known here; the caller then assumes it writes anything)."""
    t, c = work.tenant_id, work.catalog_id
    written = {source_item_read(t, work.source, work.product.source_item_id)}
    for fact in plan.decision.facts if plan.decision else ():
        if isinstance(fact, ItemChange):
            written.add(item_read(t, c, fact.item_id))
        elif isinstance(fact, MapListing):
            written.add(mapping_read(t, c, fact.listing_id))
        elif isinstance(fact, AssignIdentity):
            key = GenerationKey(t, c, fact.class_id, fact.generation)
            written |= {
                key_read(key, fact.identity_hash),
                item_read(t, c, fact.item_id),
                strong_read(t, c, fact.item_id),
            }
            written |= {holders_read(t, c, s, v) for s, v in fact.strong_ids.items()}
        else:
            return None
    return written


RESOLVE: Resolve = planner(identify)
"""The production resolution: ``plan`` over ``identify``."""
