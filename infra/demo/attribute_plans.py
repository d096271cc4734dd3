"""The workload's attribute decisions: each catalog's class tree and definitions
first, then values set and changed on active items, now and then one the domain must
refuse, and a reviewer publishing the drafts once a share of the events is written."""

from __future__ import annotations

import random

from infra.demo.catalog_picture import REVIEWERS, Catalog, Step, active_items, evidence, rule
from infra.demo.taxonomy import CLASS_TREE, DEFINITIONS, REACH
from producers.resolver.attributes import (
    DefineClass,
    PublishAttribute,
    RawValue,
    SetAttributeValue,
)
from producers.resolver.decisions import Decision
from producers.resolver.facts import Fact

PUBLISH_AT = 1 / 3
"""The share of the event budget after which each catalog's next attribute decision
publishes its drafts."""
REFUSED_ATTEMPTS = 0.25
"""The share of attribute decisions that try a value the domain must refuse."""


def plan_schema(c: Catalog, rng: random.Random) -> Step:
    """The catalog's class tree and attribute definitions, in one rule decision."""
    facts: list[Fact] = [
        *(DefineClass(cls, parent) for cls, parent in CLASS_TREE),
        *DEFINITIONS.values(),
    ]

    def committed() -> None:
        with c.lock:
            c.schema = True
            c.drafts.update(key for key, d in DEFINITIONS.items() if not d.publish)

    return Step("attribute_schema", rule(c, rng, "define", *facts), committed)


def plan_attributes(c: Catalog, rng: random.Random, drafts_due: bool) -> Step | None:
    """Set or change attribute values of active items, now and then one the domain
    must refuse; once ``drafts_due``, a reviewer first publishes the catalog's drafts."""
    with c.lock:
        if not c.schema:
            return None
        if c.drafts and not c.publishing and drafts_due:
            c.publishing = True
            return _publish(c, rng, sorted(c.drafts))
        active = {item: c.classes[item] for item in active_items(c)}
        if not active:
            return None
        attempt = _refusable(c, rng, active) if rng.random() < REFUSED_ATTEMPTS else None
        facts = [attempt[0]] if attempt else _values(c, rng, active)

    def committed() -> None:
        with c.lock:
            for fact in facts:
                c.valued.setdefault(fact.item_id, set()).add(fact.attribute_key)

    decision = rule(c, rng, "set", *facts)
    return Step("attributes", decision, committed, refusal=attempt[1] if attempt else None)


def _publish(c: Catalog, rng: random.Random, keys: list[str]) -> Step:
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
        evidence(rng, "$.specs"),
        facts=tuple(PublishAttribute(key, DEFINITIONS[key].version) for key in keys),
    )
    return Step("attribute_publish", decision, committed, abandoned)


def _value(key: str, rng: random.Random) -> RawValue:
    definition = DEFINITIONS[key]
    if definition.value_type == "number":
        return rng.choice((rng.randint(40, 4000), round(rng.uniform(40, 4000), 1)))
    return rng.choice(definition.allowed_values)


def _values(c: Catalog, rng: random.Random, active: dict[str, str]) -> list[SetAttributeValue]:
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
    c: Catalog, rng: random.Random, active: dict[str, str]
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
