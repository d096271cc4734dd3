"""The workload's item decisions, as rules make them: products and variants created
and updated, listings mapped, shipping policies versioned, products split and items
retired; ``PLANNERS`` by operation."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from infra.demo.catalog_picture import REVIEWERS, Catalog, Step, active_items, evidence, rule
from infra.demo.taxonomy import CLASSES, KIN
from producers.resolver.catalog_items import ItemChange, RetireItem
from producers.resolver.decisions import Decision
from producers.resolver.facts import Fact
from producers.resolver.listing_mappings import MapListing
from producers.resolver.shipping_policies import VersionShippingPolicy
from producers.resolver.splits import SplitItem, Successor

COLOURS = ("red", "blue", "green", "black", "white")
POLICIES = ("std", "express")
SCOPES = ("DE", "FR", "AT")
FIRST_WINDOW = datetime(2027, 1, 1, tzinfo=UTC)
WINDOW = timedelta(days=30)


def _item(
    c: Catalog, item_id: str, cls: str, rng: random.Random, parent: str | None = None
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


def _items(c: Catalog, rng: random.Random) -> Step:
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

    return Step("items", rule(c, rng, "accept", *facts), committed)


def _mappings(c: Catalog, rng: random.Random) -> Step | None:
    """Map new listings onto active items, or move a mapped one to another item."""
    with c.lock:
        active = active_items(c)
        if not active:
            return None
        moves = {c.new_id("L"): rng.choice(active) for _ in range(rng.randint(1, 2))}
        if c.listings and rng.random() < 0.3:
            moves[rng.choice(sorted(c.listings))] = rng.choice(active)

    def committed() -> None:
        with c.lock:
            c.listings.update(moves)

    facts = [MapListing(listing, item) for listing, item in moves.items()]
    return Step("mappings", rule(c, rng, "map", *facts), committed)


def _policy(c: Catalog, rng: random.Random) -> Step:
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

    return Step("policy", rule(c, rng, "version", fact), committed)


def _split(c: Catalog, rng: random.Random) -> Step | None:
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
        evidence(rng, "$.variants"),
        facts=(fact,),
    )
    return Step("split", decision, committed)


def _retire(c: Catalog, rng: random.Random) -> Step | None:
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
    return Step("retire", rule(c, rng, "retire", RetireItem(item, "discontinued")))


PLANNERS: dict[str, Callable[[Catalog, random.Random], Step | None]] = {
    "items": _items,
    "mappings": _mappings,
    "policy": _policy,
    "split": _split,
    "retire": _retire,
}
