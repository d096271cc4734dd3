"""A realistic catalog workload for the demo, made of real domain decisions.

Several tenants and catalogs; concurrent writers; every change goes through
``record_decision``, as automatic-rule or reviewer ("human") decisions citing
evidence:
- rules create and update products and variants (which depend on their product),
  and map listings onto active items (or move them to another);
- rules version shipping policies in consecutive, non-overlapping windows, and now
  and then try a window overlapping one already accepted, which the exclusion
  constraint refuses (counted as rejected, ``OVERLAPPING_POLICY_WINDOW``);
- review cases are opened and decided by reviewers at the revision they read; some
  get a second reviewer deciding the same revision (``STALE_REVISION``) and some a
  correction at the next revision naming the decision it corrects;
- products are split into successors with their listings remapped, and items are
  retired;
- each catalog starts with one rule decision defining its class tree and three
  attribute definitions (a published number reaching every class through the root, a
  published enum reaching the apparel classes through their parent, an enum for two
  leaf classes defined as a draft), and a reviewer publishes the draft once a third of
  the events are written; rules set and change values on active items, and now and
  then deliberately try one the domain must refuse: a value for the draft
  (``ATTRIBUTE_NOT_PUBLISHED``), outside the enum (``ATTRIBUTE_VALUE_INVALID``) or for
  a class the definition does not reach (``ATTRIBUTE_NOT_APPLICABLE``). An item's
  class only ever changes to one the same definitions reach, so no update is refused
  for stranding a value;
- about one transaction in ten is rolled back on purpose where it would commit.
Writers race, so a plan can meet state another writer changed first (a target item
just split or retired): the resolver refuses it with a typed error, counted as
rejected by its code. The local picture of each catalog is updated only by commits.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.unit_of_work import UnitOfWork
from producers.resolver.attributes import (
    DefineAttribute,
    DefineClass,
    PublishAttribute,
    RawValue,
    SetAttributeValue,
    applies,
)
from producers.resolver.catalog_items import ItemChange, RetireItem
from producers.resolver.decisions import Decision, record_decision
from producers.resolver.exceptions import DomainError
from producers.resolver.facts import Fact
from producers.resolver.listing_mappings import MapListing
from producers.resolver.review_cases import CaseRevision, open_case
from producers.resolver.shipping_policies import VersionShippingPolicy
from producers.resolver.splits import SplitItem, Successor
from schemas.events import Envelope, EvidenceRef
from schemas.registry_codec import codec_for
from schemas.settings import SchemaRegistrySettings

CLASSES = ("shoe", "jacket", "lamp", "kettle", "desk")
CLASS_TREE = (
    ("goods", None),
    ("apparel", "goods"),
    ("home", "goods"),
    ("shoe", "apparel"),
    ("jacket", "apparel"),
    ("lamp", "home"),
    ("kettle", "home"),
    ("desk", "home"),
)
"""Each catalog's classes (class, parent), parents first; items take the leaves."""
WEIGHT = DefineAttribute("weight_g", 1, "Weight in grams", "number", ("goods",), publish=True)
FIT = DefineAttribute(
    "fit", 1, "Fit", "enum", ("apparel",), ("slim", "regular", "wide"), publish=True
)
ENERGY = DefineAttribute(
    "energy_class", 1, "Energy class", "enum", ("lamp", "kettle"), ("A", "B", "C", "D")
)
DEFINITIONS = {d.attribute_key: d for d in (WEIGHT, FIT, ENERGY)}
"""Defined by each catalog's first decision; ENERGY as a draft, published later."""
PUBLISH_AT = 1 / 3
"""The share of the event budget after which each catalog's next attribute decision
publishes its drafts."""
REFUSED_ATTEMPTS = 0.25
"""The share of attribute decisions that try a value the domain must refuse."""
COLOURS = ("red", "blue", "green", "black", "white")
POLICIES = ("std", "express")
SCOPES = ("DE", "FR", "AT")
FIRST_WINDOW = datetime(2027, 1, 1, tzinfo=UTC)
WINDOW = timedelta(days=30)
RULE = "rule:catalog-sync"
REVIEWERS = ("reviewer:ana", "reviewer:ben")

# Operation mix: (name, weight).
OPERATIONS = (
    ("items", 40),
    ("mappings", 20),
    ("policy", 10),
    ("review", 15),
    ("split", 5),
    ("retire", 10),
    ("attributes", 12),
)


def _lineage(class_id: str) -> list[str]:
    parents = dict(CLASS_TREE)
    lineage = [class_id]
    while (parent := parents.get(lineage[-1])) is not None:
        lineage.append(parent)
    return lineage


REACH = {
    cls: frozenset(key for key, d in DEFINITIONS.items() if applies(_lineage(cls), d.applies_to))
    for cls in CLASSES
}
"""Item class → the keys of the definitions reaching it (directly or through an
ancestor)."""
KIN = {cls: tuple(other for other in CLASSES if REACH[other] == REACH[cls]) for cls in CLASSES}
"""The classes an item of a class may move to: those the same definitions reach, so
a class change never leaves one of its values out of reach (the domain would refuse
the change, ``ATTRIBUTE_NOT_APPLICABLE``)."""


class _Abandon(Exception):
    """Raised where a Unit of Work would commit, to roll it back on purpose."""


class _AbandonedUnitOfWork(UnitOfWork):
    """Rolls back where it would commit: everything the decision wrote (decision,
    facts, effects, the cursor lock) is undone and no position is used."""

    def commit(self) -> list[Envelope]:
        raise _Abandon()


@dataclass
class _Catalog:
    """What the writers know about one catalog, from committed decisions only."""

    tenant_id: str
    catalog_id: str
    products: list[str] = field(default_factory=list)
    variants: dict[str, str] = field(default_factory=dict)
    """Active variant → its product."""
    listings: dict[str, str] = field(default_factory=dict)
    """Listing → the item it is mapped to."""
    windows: dict[tuple[str, str], list[datetime]] = field(default_factory=dict)
    """(policy, scope) → starts of the accepted windows."""
    next_window: dict[tuple[str, str], datetime] = field(default_factory=dict)
    classes: dict[str, str] = field(default_factory=dict)
    """Item → its class, for every item a committed decision wrote."""
    valued: dict[str, set[str]] = field(default_factory=dict)
    """Item → the keys it has a value of."""
    schema: bool = False
    """Whether the class tree and the definitions are committed."""
    drafts: set[str] = field(default_factory=set)
    """Keys whose definition is still a draft."""
    publishing: bool = False
    """Whether a decision publishing the drafts is under way."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    next_id: int = 0
    tag: str = ""
    """Part of every id this run makes, so two runs on one catalog never collide."""

    def new_id(self, prefix: str) -> str:
        self.next_id += 1
        return f"{prefix}{self.tag}{self.next_id}"


@dataclass
class _Step:
    """One decision to record, and what to note about the catalog if it commits."""

    kind: str
    decision: Decision
    committed: Callable[[], None] = lambda: None
    abandoned: Callable[[], None] = lambda: None
    """Called instead of ``committed`` when the decision was rolled back or refused."""
    refusal: str | None = None
    """The code the domain must refuse this deliberate attempt with."""


@dataclass
class WorkloadStats:
    transactions: int = 0
    rolled_back: int = 0
    rejected: int = 0
    events: int = 0
    decisions: Counter[str] = field(default_factory=Counter)
    """Committed decisions by operation."""
    rejected_by_code: Counter[str] = field(default_factory=Counter)
    refusals_attempted: Counter[str] = field(default_factory=Counter)
    """Deliberately refusable attempts, by the code they were made to draw (one can
    still commit when another writer changed the state first, e.g. published the
    draft it aimed at)."""
    cases_opened: int = 0
    interrupted: int = 0
    """Operations cut short by a ``transient`` error (their outcome unknown here)."""
    lock: threading.Lock = field(default_factory=threading.Lock)


def streams_for(run_id: str, tenants: int, catalogs: int = 2) -> list[tuple[str, str]]:
    return [
        (f"{run_id}-tenant{t}", f"catalog{c}")
        for t in range(1, tenants + 1)
        for c in range(1, catalogs + 1)
    ]


def run_workload(
    pool: ConnectionPool,
    epochs: EpochSource,
    streams: list[tuple[str, str]],
    events: int,
    writers: int,
    rollback_rate: float = 0.1,
    progress: Callable[[int], None] = lambda _: None,
    stop: threading.Event | None = None,
    pace_seconds: float = 0.0,
    id_tag: str = "",
    transient: tuple[type[BaseException], ...] = (),
) -> WorkloadStats:
    """Commit about ``events`` events' worth of decisions from ``writers`` threads;
    with ``stop``, until it is set (or ``events``), each writer resting
    ``pace_seconds`` between decisions (a steady load beside other work). A later
    run on catalogs an earlier one wrote needs an ``id_tag`` of its own (the ids it
    makes would collide otherwise).

    ``transient``: errors a writer outlives (a database restarting under it): the
    operation is given up as if refused, counted ``interrupted``, and the writer goes
    on after a short rest. Whether it committed is not known here (the answer to a
    COMMIT can be lost), so the local picture leaves it out; the databases are the
    truth for anyone checking."""
    catalogs = [_Catalog(t, c, tag=id_tag) for t, c in streams]
    codec = codec_for(SchemaRegistrySettings())  # the framing users' writers would choose
    stats = WorkloadStats()
    names = [name for name, _ in OPERATIONS]
    weights = [weight for _, weight in OPERATIONS]

    def record(step: _Step, rng: random.Random, may_roll_back: bool = True) -> uuid.UUID | None:
        """Record one decision; its id if it committed."""
        roll_back = may_roll_back and rng.random() < rollback_rate
        unit = _AbandonedUnitOfWork if roll_back else UnitOfWork
        if step.refusal is not None:
            with stats.lock:
                stats.refusals_attempted[step.refusal] += 1
        try:
            with unit(pool, epochs, codec) as uow:
                record_decision(uow, step.decision)
                envelopes = uow.envelopes
        except transient:
            step.abandoned()
            raise
        except _Abandon:
            step.abandoned()
            with stats.lock:
                stats.rolled_back += 1
            return None
        except DomainError as exc:
            step.abandoned()
            with stats.lock:
                stats.rejected += 1
                stats.rejected_by_code[exc.code] += 1
            return None
        step.committed()
        with stats.lock:
            stats.transactions += 1
            stats.events += len(envelopes)
            stats.decisions[step.kind] += 1
        return step.decision.decision_id

    def one_operation(rng: random.Random) -> None:
        c = rng.choice(catalogs)
        operation = rng.choices(names, weights)[0]
        if operation == "review":
            _review(c, rng, record, lambda case: _open(pool, epochs, stats, c, case))
            return
        if operation == "attributes":
            with stats.lock:
                drafts_due = stats.events >= events * PUBLISH_AT
            step = _attributes(c, rng, drafts_due)
        else:
            step = PLANNERS[operation](c, rng)
        if step is not None:
            record(step, rng)

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        while stop is None or not stop.is_set():
            with stats.lock:
                if stats.events >= events:
                    return
            try:
                one_operation(rng)
            except transient:
                with stats.lock:
                    stats.interrupted += 1
                (stop or threading.Event()).wait(0.2)
            progress(stats.events)
            if pace_seconds and stop is not None:
                stop.wait(pace_seconds)

    # Each catalog's classes and definitions, once, before the writers start (never
    # rolled back on purpose: every later attribute decision builds on them).
    setup = random.Random(len(catalogs))
    for c in catalogs:
        record(_schema(c, setup), setup, may_roll_back=False)
    threads = [threading.Thread(target=writer, args=(seed,)) for seed in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return stats


def _evidence(rng: random.Random, locator: str) -> tuple[EvidenceRef, ...]:
    return (EvidenceRef(capture_id=f"capture-{rng.getrandbits(40):010x}", locator=locator),)


def _rule(c: _Catalog, rng: random.Random, action: str, *facts: Fact) -> Decision:
    return Decision(
        c.tenant_id,
        c.catalog_id,
        action,
        RULE,
        "the source lists this",
        _evidence(rng, "$.offers"),
        facts=facts,
        actor_kind="rule",
    )


def _item(
    c: _Catalog, item_id: str, cls: str, rng: random.Random, parent: str | None = None
) -> ItemChange:
    return ItemChange(
        c.tenant_id,
        c.catalog_id,
        item_id,
        cls,
        f"{rng.choice(COLOURS)} {cls} {item_id}",
        parent_item_id=parent,
        attributes={"colour": rng.choice(COLOURS), "size": str(rng.randint(1, 12))},
    )


def _items(c: _Catalog, rng: random.Random) -> _Step:
    """Create products and variants, and update active ones (an update may move an
    item to a kindred class, one the same definitions reach)."""
    facts: list[Fact] = []
    products: list[str] = []
    variants: dict[str, str] = {}
    classes: dict[str, str] = {}
    with c.lock:
        for _ in range(rng.randint(1, 3)):
            roll = rng.random()
            if roll < 0.35 or not c.products:
                item, parent, cls = c.new_id("p"), None, rng.choice(CLASSES)
                products.append(item)
            elif roll < 0.7:
                parent = rng.choice(c.products)
                item, cls = f"{parent}-v{c.new_id('')}", rng.choice(CLASSES)
                variants[item] = parent
            elif roll < 0.85 or not c.variants:
                item, parent = rng.choice(c.products), None
                cls = rng.choice(KIN[c.classes[item]])
            else:
                item, parent = rng.choice(sorted(c.variants.items()))
                cls = rng.choice(KIN[c.classes[item]])
            classes[item] = cls
            facts.append(_item(c, item, cls, rng, parent))

    def committed() -> None:
        with c.lock:
            c.products.extend(products)
            c.variants.update(variants)
            c.classes.update(classes)

    return _Step("items", _rule(c, rng, "accept", *facts), committed)


def _active(c: _Catalog) -> list[str]:
    return [*c.products, *c.variants]


def _mappings(c: _Catalog, rng: random.Random) -> _Step | None:
    """Map new listings onto active items, or move a mapped one to another item."""
    with c.lock:
        active = _active(c)
        if not active:
            return None
        moves = {c.new_id("L"): rng.choice(active) for _ in range(rng.randint(1, 2))}
        if c.listings and rng.random() < 0.3:
            moves[rng.choice(sorted(c.listings))] = rng.choice(active)

    def committed() -> None:
        with c.lock:
            c.listings.update(moves)

    facts = [MapListing(listing, item) for listing, item in moves.items()]
    return _Step("mappings", _rule(c, rng, "map", *facts), committed)


def _policy(c: _Catalog, rng: random.Random) -> _Step:
    """The next window of a policy in a scope, or (one time in five, once a window is
    accepted) a window overlapping an accepted one, which PostgreSQL refuses."""
    key = (f"{c.catalog_id}-{rng.choice(POLICIES)}", rng.choice(SCOPES))
    with c.lock:
        accepted = c.windows.get(key, [])
        if accepted and rng.random() < 0.2:
            start = rng.choice(accepted) + timedelta(days=10)
        else:
            start = c.next_window.get(key, FIRST_WINDOW)
            c.next_window[key] = start + WINDOW
    fact = VersionShippingPolicy(
        key[0], key[1], start, start + WINDOW, {"rate": f"{rng.randint(3, 9)}.90"}
    )

    def committed() -> None:
        with c.lock:
            c.windows.setdefault(key, []).append(start)

    return _Step("policy", _rule(c, rng, "version", fact), committed)


def _split(c: _Catalog, rng: random.Random) -> _Step | None:
    """Split a product into two successors, moving each of its listings to one."""
    with c.lock:
        if not c.products:
            return None
        source = c.products.pop(rng.randrange(len(c.products)))
        # Its variants keep depending on a product that is no longer active: they
        # can no longer change, so the writers leave them alone.
        for variant in [v for v, p in c.variants.items() if p == source]:
            del c.variants[variant]
        successors = (c.new_id(f"{source}-s"), c.new_id(f"{source}-s"))
        cls = c.classes[source]  # successors take the source's class
        remaps = {
            listing: rng.choice(successors)
            for listing, item in sorted(c.listings.items())
            if item == source
        }
    fact = SplitItem(source, tuple(Successor(s, f"part of {source}") for s in successors), remaps)

    def committed() -> None:
        with c.lock:
            c.products.extend(successors)
            c.listings.update(remaps)
            c.classes.update(dict.fromkeys(successors, cls))

    decision = Decision(
        c.tenant_id,
        c.catalog_id,
        "split",
        rng.choice(REVIEWERS),
        "two distinct products were merged",
        _evidence(rng, "$.variants"),
        facts=(fact,),
    )
    return _Step("split", decision, committed)


def _retire(c: _Catalog, rng: random.Random) -> _Step | None:
    """Retire a variant, or now and then a product (never deleted)."""
    with c.lock:
        if c.variants and (rng.random() < 0.7 or not c.products):
            item = rng.choice(sorted(c.variants))
            del c.variants[item]
        elif c.products:
            item = c.products.pop(rng.randrange(len(c.products)))
            for variant in [v for v, p in c.variants.items() if p == item]:
                del c.variants[variant]
        else:
            return None
    return _Step("retire", _rule(c, rng, "retire", RetireItem(item, "discontinued")))


def _schema(c: _Catalog, rng: random.Random) -> _Step:
    """The catalog's class tree and attribute definitions, in one rule decision."""
    facts: list[Fact] = [
        *(DefineClass(cls, parent) for cls, parent in CLASS_TREE),
        *DEFINITIONS.values(),
    ]

    def committed() -> None:
        with c.lock:
            c.schema = True
            c.drafts.update(key for key, d in DEFINITIONS.items() if not d.publish)

    return _Step("attribute_schema", _rule(c, rng, "define", *facts), committed)


def _attributes(c: _Catalog, rng: random.Random, drafts_due: bool) -> _Step | None:
    """Set or change attribute values of active items, now and then one the domain
    must refuse; once ``drafts_due``, a reviewer first publishes the catalog's drafts."""
    with c.lock:
        if not c.schema:
            return None
        if c.drafts and not c.publishing and drafts_due:
            c.publishing = True
            return _publish(c, rng, sorted(c.drafts))
        active = {item: c.classes[item] for item in _active(c)}
        if not active:
            return None
        attempt = _refusable(c, rng, active) if rng.random() < REFUSED_ATTEMPTS else None
        facts = [attempt[0]] if attempt else _values(c, rng, active)

    def committed() -> None:
        with c.lock:
            for fact in facts:
                c.valued.setdefault(fact.item_id, set()).add(fact.attribute_key)

    decision = _rule(c, rng, "set", *facts)
    return _Step("attributes", decision, committed, refusal=attempt[1] if attempt else None)


def _publish(c: _Catalog, rng: random.Random, keys: list[str]) -> _Step:
    """A reviewer publishes the draft definitions (the caller holds the lock and has
    marked the catalog as publishing, so no other writer tries it meanwhile)."""

    def committed() -> None:
        with c.lock:
            c.drafts.difference_update(keys)
            c.publishing = False

    def abandoned() -> None:
        with c.lock:
            c.publishing = False

    decision = Decision(
        c.tenant_id,
        c.catalog_id,
        "publish",
        rng.choice(REVIEWERS),
        "the definition was reviewed against the suppliers' data sheets",
        _evidence(rng, "$.specs"),
        facts=tuple(PublishAttribute(key, DEFINITIONS[key].version) for key in keys),
    )
    return _Step("attribute_publish", decision, committed, abandoned)


def _value(key: str, rng: random.Random) -> RawValue:
    definition = DEFINITIONS[key]
    if definition.value_type == "number":
        return rng.choice((rng.randint(40, 4000), round(rng.uniform(40, 4000), 1)))
    return rng.choice(definition.allowed_values)


def _values(c: _Catalog, rng: random.Random, active: dict[str, str]) -> list[SetAttributeValue]:
    """One or two values of published definitions reaching the items' classes; some
    change a value the item has (its revision + 1). The caller holds the lock."""
    chosen: dict[tuple[str, str], SetAttributeValue] = {}
    # A published key no item of the catalog has a value of yet goes first, so every
    # definition gets values however the writers' threads happen to interleave.
    ever = set().union(*c.valued.values()) if c.valued else set()
    unset = sorted(
        key
        for key in DEFINITIONS
        if key not in ever | c.drafts and any(key in REACH[cls] for cls in active.values())
    )
    if unset:
        key = unset[0]
        item = rng.choice(sorted(i for i, cls in active.items() if key in REACH[cls]))
        chosen[item, key] = SetAttributeValue(item, key, DEFINITIONS[key].version, _value(key, rng))
    for _ in range(rng.randint(1, 2) - len(chosen)):
        valued = sorted(i for i in active if c.valued.get(i, set()) - c.drafts)
        if valued and rng.random() < 0.4:
            item = rng.choice(valued)
            key = rng.choice(sorted(c.valued[item] - c.drafts))
        else:
            item = rng.choice(sorted(active))
            # WEIGHT reaches every class, so there is always a key.
            key = rng.choice(sorted(REACH[active[item]] - c.drafts))
        version = DEFINITIONS[key].version
        chosen[item, key] = SetAttributeValue(item, key, version, _value(key, rng))
    return list(chosen.values())


def _refusable(
    c: _Catalog, rng: random.Random, active: dict[str, str]
) -> tuple[SetAttributeValue, str] | None:
    """A value the domain must refuse, and the code it must refuse it with: for a draft
    definition, outside an enum, or for an item whose class the definition does not
    reach. The caller holds the lock."""
    attempts: dict[str, list[SetAttributeValue]] = {}
    for key, d in DEFINITIONS.items():
        reached = sorted(i for i, cls in active.items() if key in REACH[cls])
        others = sorted(i for i, cls in active.items() if key not in REACH[cls])
        if key in c.drafts:
            if reached:
                value = SetAttributeValue(rng.choice(reached), key, d.version, _value(key, rng))
                attempts.setdefault("ATTRIBUTE_NOT_PUBLISHED", []).append(value)
            continue
        if d.value_type == "enum" and reached:
            value = SetAttributeValue(rng.choice(reached), key, d.version, "oversized")
            attempts.setdefault("ATTRIBUTE_VALUE_INVALID", []).append(value)
        if others:
            value = SetAttributeValue(rng.choice(others), key, d.version, _value(key, rng))
            attempts.setdefault("ATTRIBUTE_NOT_APPLICABLE", []).append(value)
    if not attempts:
        return None
    code = rng.choice(sorted(attempts))  # each refusal as likely as the others
    return rng.choice(attempts[code]), code


PLANNERS: dict[str, Callable[[_Catalog, random.Random], _Step | None]] = {
    "items": _items,
    "mappings": _mappings,
    "policy": _policy,
    "split": _split,
    "retire": _retire,
}


def _open(
    pool: ConnectionPool, epochs: EpochSource, stats: WorkloadStats, c: _Catalog, case: str
) -> None:
    """Open a case (the resolver's own work queue: no cursor lock, no event)."""
    with UnitOfWork(pool, epochs, codec_for(SchemaRegistrySettings())) as uow:
        open_case(uow, c.tenant_id, c.catalog_id, case, "listing", case.removeprefix("case-"))
        uow.commit()
    with stats.lock:
        stats.cases_opened += 1


def _review(
    c: _Catalog,
    rng: random.Random,
    record: Callable[[_Step, random.Random], uuid.UUID | None],
    open_: Callable[[str], None],
) -> None:
    """A reviewer maps a listing under a review case at revision 1. Half the time a
    second reviewer, who read the same revision, decides too and is refused as stale;
    a quarter of the time the first reviewer then corrects the mapping at revision 2."""
    with c.lock:
        active = _active(c)
        if len(active) < 2:
            return
        listing = c.new_id("L")
        first, second = rng.sample(active, 2)
    case = f"case-{listing}"
    open_(case)

    def human(reviewer: str, item: str, revision: int, *prior: uuid.UUID) -> _Step:
        def committed() -> None:
            with c.lock:
                c.listings[listing] = item

        decision = Decision(
            c.tenant_id,
            c.catalog_id,
            "correct" if prior else "map",
            reviewer,
            "the listing shows this product",
            _evidence(rng, "$.title"),
            facts=(MapListing(listing, item),),
            case=CaseRevision(case, revision),
            prior_decision_ids=prior,
        )
        return _Step("review", decision, committed)

    decided = record(human(REVIEWERS[0], first, 1), rng)
    if decided is None:
        return
    if rng.random() < 0.5:
        record(human(REVIEWERS[1], second, 1), rng)  # refused: STALE_REVISION
    if rng.random() < 0.25:
        record(human(REVIEWERS[0], second, 2, decided), rng)
