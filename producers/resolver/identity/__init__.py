"""Item identity (INV-02): identity-rule generations, identity keys and lookups.

A class's identity rule names the claim fields whose normalized values identify an
item (``("brand", "mpn")``, later perhaps ``("gtin",)``).

- ``rules``: the rule, normalization and the identity hash (pure, no I/O);
- ``generations``: a generation's pinning, creation and backfill;
- ``facts``: what a decision accepts (activation, collision resolution, key
  assignment and release);
- ``lookups``: which item holds a hash in a generation;
- ``queries``, ``routes``, ``http_models``: the operator API.

The names below are the feature's surface for the rest of the code (the capture
worker, the demo); modules of the feature import each other directly.
"""

from producers.resolver.identity.facts import (
    ACTIVATE_ACTION,
    RESOLVE_ACTION,
    ActivateGeneration,
    AssignIdentity,
    ReleaseIdentity,
    ResolveCollision,
)
from producers.resolver.identity.generations import (
    BackfillReport,
    Generation,
    backfill_generation,
    create_and_backfill,
    create_generation,
    pinned_generation,
)
from producers.resolver.identity.lookups import (
    IdentityLookup,
    KeyReads,
    TxKeyReads,
    lookup,
    lookup_item,
    lookup_with,
)
from producers.resolver.identity.rules import (
    GTIN_FIELDS,
    IdentityRule,
    identity_hash,
    normalize_claim,
    normalize_strong_id,
    strong_ids_of,
)

__all__ = [
    "ACTIVATE_ACTION",
    "GTIN_FIELDS",
    "RESOLVE_ACTION",
    "ActivateGeneration",
    "AssignIdentity",
    "BackfillReport",
    "Generation",
    "IdentityLookup",
    "IdentityRule",
    "KeyReads",
    "ReleaseIdentity",
    "ResolveCollision",
    "TxKeyReads",
    "backfill_generation",
    "create_and_backfill",
    "create_generation",
    "identity_hash",
    "lookup",
    "lookup_item",
    "lookup_with",
    "normalize_claim",
    "normalize_strong_id",
    "pinned_generation",
    "strong_ids_of",
]
