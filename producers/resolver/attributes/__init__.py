"""Classes, attribute definitions and attribute values (INV-07).

- ``rules``: applicability through a class lineage, canonical value text, limits
  (pure, no I/O);
- ``facts``: what a decision accepts (define a class, define and publish an
  attribute version, set an item's value);
- ``class_changes``: refusing an item's class change that would strand a value;
- ``queries``, ``routes``, ``http_models``: the operator API's reads.

The names below are the feature's surface for the rest of the code (the demo's
workload, the processors' tests); modules of the feature import each other directly.
"""

from producers.resolver.attributes.facts import (
    DefineAttribute,
    DefineClass,
    PublishAttribute,
    SetAttributeValue,
)
from producers.resolver.attributes.rules import RawValue, applies, canonical_value

__all__ = [
    "DefineAttribute",
    "DefineClass",
    "PublishAttribute",
    "RawValue",
    "SetAttributeValue",
    "applies",
    "canonical_value",
]
