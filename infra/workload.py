"""A realistic catalog workload for the demo and the benchmark.

Several tenants and catalogs, products with variants that depend on them, revisions,
retirements, concurrent writers, and some transactions that roll back on purpose.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from psycopg_pool import ConnectionPool

from db.epochs import EpochSource
from db.unit_of_work import UnitOfWork
from producers.resolver.catalog_items import ItemChange, RetireItem
from producers.resolver.decisions import Decision, record_decision
from producers.resolver.exceptions import DomainError
from producers.resolver.facts import Fact
from schemas.codec import CODEC
from schemas.events import Envelope, EvidenceRef

CLASSES = ("shoe", "jacket", "lamp", "kettle", "desk")
COLOURS = ("red", "blue", "green", "black", "white")


class _Abandon(Exception):
    """Raised inside a Unit of Work to roll it back on purpose."""


class _AbandonedUnitOfWork(UnitOfWork):
    """A Unit of Work that rolls back where it would commit: everything the decision
    wrote (decision, facts, effects, the cursor lock) is undone, no position used."""

    def commit(self) -> list[Envelope]:
        raise _Abandon()


@dataclass
class _Stream:
    tenant_id: str
    catalog_id: str
    products: list[str] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    next_id: int = 0


@dataclass
class WorkloadStats:
    transactions: int = 0
    rolled_back: int = 0
    rejected: int = 0
    events: int = 0
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
) -> WorkloadStats:
    """Commit about ``events`` accepted changes from ``writers`` concurrent threads."""
    state = [_Stream(t, c) for t, c in streams]
    stats = WorkloadStats()

    def one_transaction(rng: random.Random) -> None:
        s = rng.choice(state)
        abandon = rng.random() < rollback_rate
        planned: list[tuple[str, str | None]] = []
        with s.lock:
            for _ in range(rng.randint(1, 3)):
                s.next_id += 1
                planned.append((f"p{s.next_id}", None))
        facts: list[Fact] = []
        new_products: list[str] = []
        new_variants: list[str] = []
        with s.lock:
            products = list(s.products)
            variants = list(s.variants)
        for item_id, _ in planned:
            roll = rng.random()
            if roll < 0.3 or not products:
                facts.append(_change(s, item_id, rng))
                new_products.append(item_id)
            elif roll < 0.7:
                vid = f"{rng.choice(products)}-v{item_id[1:]}"
                facts.append(_change(s, vid, rng, parent=vid.split("-v")[0]))
                new_variants.append(vid)
            elif roll < 0.95 or not variants:
                facts.append(_change(s, rng.choice(products), rng))
            else:
                target = rng.choice(variants)
                facts.append(RetireItem(target, "discontinued"))
                with s.lock:
                    if target in s.variants:
                        s.variants.remove(target)
        decision = Decision(
            s.tenant_id,
            s.catalog_id,
            "accept",
            "rule:demo-catalog-sync",
            "the source lists these items",
            (EvidenceRef(capture_id=f"demo-capture-{rng.getrandbits(32):08x}", locator="$"),),
            facts=tuple(facts),
            actor_kind="rule",
        )
        try:
            unit = _AbandonedUnitOfWork if abandon else UnitOfWork
            with unit(pool, epochs, CODEC) as uow:
                record_decision(uow, decision)
                envelopes = uow.envelopes
            with s.lock:
                s.products.extend(new_products)
                s.variants.extend(new_variants)
            with stats.lock:
                stats.transactions += 1
                stats.events += len(envelopes)
        except _Abandon:
            with stats.lock:
                stats.rolled_back += 1
        except DomainError:
            # e.g. a variant of a product retired meanwhile: rejected, rolled back.
            with stats.lock:
                stats.rejected += 1

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        while True:
            with stats.lock:
                if stats.events >= events:
                    return
            one_transaction(rng)
            progress(stats.events)

    threads = [threading.Thread(target=writer, args=(seed,)) for seed in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return stats


def _change(s: _Stream, item_id: str, rng: random.Random, parent: str | None = None) -> ItemChange:
    cls = rng.choice(CLASSES)
    return ItemChange(
        s.tenant_id,
        s.catalog_id,
        item_id,
        cls,
        f"{rng.choice(COLOURS)} {cls} {item_id}",
        parent_item_id=parent,
        attributes={"colour": rng.choice(COLOURS), "size": str(rng.randint(1, 12))},
    )
