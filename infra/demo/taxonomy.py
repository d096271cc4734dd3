"""Each catalog's class tree and attribute definitions in the demo's workload, and
which classes each definition reaches (directly or through an ancestor)."""

from __future__ import annotations

from producers.resolver.attributes import DefineAttribute, applies

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
