"""What the workload's writers know of each catalog (from committed decisions only),
and one decision a writer plans (``Step``), made as a rule or a reviewer makes it."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from producers.resolver.decisions import Decision
from producers.resolver.facts import Fact
from schemas.events import EvidenceRef

RULE = "rule:catalog-sync"
REVIEWERS = ("reviewer:ana", "reviewer:ben")


@dataclass
class Catalog:
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
class Step:
    """One decision to record, and what to note about the catalog if it commits."""

    kind: str
    decision: Decision
    committed: Callable[[], None] = lambda: None
    abandoned: Callable[[], None] = lambda: None
    """Called instead of ``committed`` when the decision was rolled back or refused."""
    refusal: str | None = None
    """The code the domain must refuse this deliberate attempt with."""


def evidence(rng: random.Random, locator: str) -> tuple[EvidenceRef, ...]:
    return (EvidenceRef(capture_id=f"capture-{rng.getrandbits(40):010x}", locator=locator),)


def rule(c: Catalog, rng: random.Random, action: str, *facts: Fact) -> Decision:
    return Decision(
        c.tenant_id,
        c.catalog_id,
        action,
        RULE,
        "the source lists this",
        evidence(rng, "$.offers"),
        facts=facts,
        actor_kind="rule",
    )


def active_items(c: Catalog) -> list[str]:
    return [*c.products, *c.variants]
