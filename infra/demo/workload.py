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
rejected by its code. The local picture of each catalog is updated only by commits
(``infra.demo.catalog_picture``). The decisions are planned in
``infra.demo.item_plans``, ``infra.demo.attribute_plans`` (on the classes and
definitions of ``infra.demo.taxonomy``) and ``infra.demo.review_plans``.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.unit_of_work import UnitOfWork
from infra.demo.attribute_plans import PUBLISH_AT, plan_attributes, plan_schema
from infra.demo.catalog_picture import Catalog, Step
from infra.demo.item_plans import PLANNERS
from infra.demo.review_plans import review
from producers.resolver.decisions import record_decision
from producers.resolver.exceptions import DomainError
from producers.resolver.review_cases import open_case
from schemas.codec import EventCodec
from schemas.events import Envelope
from schemas.registry_codec import codec_for
from schemas.settings import SchemaRegistrySettings

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


class _Abandon(Exception):
    """Raised where a Unit of Work would commit, to roll it back on purpose."""


class _AbandonedUnitOfWork(UnitOfWork):
    """Rolls back where it would commit: everything the decision wrote (decision,
    facts, effects, the cursor lock) is undone and no position is used."""

    def commit(self) -> list[Envelope]:
        raise _Abandon()


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
    catalogs = [Catalog(t, c, tag=id_tag) for t, c in streams]
    codec = codec_for(SchemaRegistrySettings())  # the framing users' writers would choose
    stats = WorkloadStats()
    record = _Recorder(pool, epochs, codec, stats, rollback_rate, transient)
    names = [name for name, _ in OPERATIONS]
    weights = [weight for _, weight in OPERATIONS]

    def one_operation(rng: random.Random) -> None:
        c = rng.choice(catalogs)
        operation = rng.choices(names, weights)[0]
        if operation == "review":
            review(c, rng, record, lambda case: _open(pool, epochs, stats, c, case))
            return
        if operation == "attributes":
            with stats.lock:
                drafts_due = stats.events >= events * PUBLISH_AT
            step = plan_attributes(c, rng, drafts_due)
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
        record(plan_schema(c, setup), setup, may_roll_back=False)
    threads = [threading.Thread(target=writer, args=(seed,)) for seed in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return stats


@dataclass
class _Recorder:
    """Records one planned decision in a Unit of Work of its own and counts what
    became of it; a ``rollback_rate`` share of them is rolled back where it would
    commit (unless ``may_roll_back`` is false)."""

    pool: ConnectionPool
    epochs: EpochSource
    codec: EventCodec
    stats: WorkloadStats
    rollback_rate: float
    transient: tuple[type[BaseException], ...]

    def __call__(
        self, step: Step, rng: random.Random, may_roll_back: bool = True
    ) -> uuid.UUID | None:
        """Record one decision; its id if it committed."""
        stats = self.stats
        roll_back = may_roll_back and rng.random() < self.rollback_rate
        unit = _AbandonedUnitOfWork if roll_back else UnitOfWork
        if step.refusal is not None:
            with stats.lock:
                stats.refusals_attempted[step.refusal] += 1
        try:
            with unit(self.pool, self.epochs, self.codec) as uow:
                record_decision(uow, step.decision)
                envelopes = uow.envelopes
        except self.transient:
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


def _open(
    pool: ConnectionPool, epochs: EpochSource, stats: WorkloadStats, c: Catalog, case: str
) -> None:
    """Open a case (the resolver's own work queue: no cursor lock, no event)."""
    with UnitOfWork(pool, epochs, codec_for(SchemaRegistrySettings())) as uow:
        open_case(uow, c.tenant_id, c.catalog_id, case, "listing", case.removeprefix("case-"))
        uow.commit()
    with stats.lock:
        stats.cases_opened += 1
