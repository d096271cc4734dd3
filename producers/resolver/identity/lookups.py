"""Identity lookups (INV-02): which item holds a hash in one generation.

Only servable keys are found: an active key of an active generation, or a retired
key of a retired one (for a replay pinned to it); claimed strong identifiers can
only turn a match into a conflict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from db.repositories import identity as repo
from db.repositories import strong_ids as strong
from db.repositories.identity import GenerationKey, KeyMatch
from db.unit_of_work import Transaction
from producers.resolver.identity.rules import check_hash, normalize_strong_id


@dataclass(frozen=True, slots=True)
class IdentityLookup:
    """What a lookup found. ``match``: the key's holder, ``item_id`` (whose current
    ``item_status`` may no longer be active); ``no_key``: no servable key;
    ``strong_id_conflict``: a key matched ``item_id`` but claimed strong identifiers
    contradict it (``conflicts`` names the schemes)."""

    outcome: Literal["match", "no_key", "strong_id_conflict"]
    item_id: str | None = None
    item_status: str | None = None
    conflicts: tuple[str, ...] = ()


class KeyReads(Protocol):
    """What a lookup reads (``TxKeyReads``: straight from a transaction)."""

    def find_key(self, key: GenerationKey, identity_hash: str) -> KeyMatch | None: ...

    def strong_ids(self, tenant_id: str, catalog_id: str, item_id: str) -> dict[str, str]: ...

    def strong_id_holders(
        self, tenant_id: str, catalog_id: str, scheme: str, value: str
    ) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class TxKeyReads:
    """``KeyReads`` of the identity repository's statements in ``tx``."""

    tx: Transaction

    def find_key(self, key: GenerationKey, identity_hash: str) -> KeyMatch | None:
        return repo.find_key(self.tx, key, identity_hash)

    def strong_ids(self, tenant_id: str, catalog_id: str, item_id: str) -> dict[str, str]:
        return strong.strong_ids(self.tx, tenant_id, catalog_id, item_id)

    def strong_id_holders(
        self, tenant_id: str, catalog_id: str, scheme: str, value: str
    ) -> list[str]:
        return strong.strong_id_holders(self.tx, tenant_id, catalog_id, scheme, value)


def lookup(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    class_id: str,
    generation: int,
    identity_hash: str,
    strong_ids: Mapping[str, str] = {},
) -> IdentityLookup:
    """``lookup_with`` the transaction's own reads."""
    return lookup_with(
        TxKeyReads(tx), tenant_id, catalog_id, class_id, generation, identity_hash, strong_ids
    )


def lookup_with(
    reads: KeyReads,
    tenant_id: str,
    catalog_id: str,
    class_id: str,
    generation: int,
    identity_hash: str,
    strong_ids: Mapping[str, str] = {},
) -> IdentityLookup:
    """Look the hash up in one generation, joined on all five columns.

    Only an active key of an active generation, or a retired key of a retired one
    (a replay pinned to it), is served; never a collision candidate, a ready key of
    a generation never activated, or a released key. Strong identifiers only narrow:
    a claimed value that differs from the holder's, or that another item carries
    while the holder does not, turns the match into a conflict; without a key there
    is never a match. ``reads`` answers what it reads (the capture worker's answer
    a batch of products' reads from a few statements).
    """
    check_hash(identity_hash)
    key = GenerationKey(tenant_id, catalog_id, class_id, generation)
    found = reads.find_key(key, identity_hash)
    if found is None:
        return IdentityLookup("no_key")
    holder = found.item_id
    recorded = reads.strong_ids(tenant_id, catalog_id, holder)
    conflicts = []
    for scheme, value in strong_ids.items():
        pair = normalize_strong_id(scheme, value)
        if pair is None:
            continue  # an unusable claimed identifier narrows nothing
        name, normalized = pair
        if name in recorded:
            if recorded[name] != normalized:
                conflicts.append(name)
        elif reads.strong_id_holders(tenant_id, catalog_id, name, normalized):
            conflicts.append(name)
    if conflicts:
        return IdentityLookup("strong_id_conflict", holder, found.item_status, tuple(conflicts))
    return IdentityLookup("match", holder, found.item_status)


def lookup_item(
    tx: Transaction,
    tenant_id: str,
    catalog_id: str,
    class_id: str,
    generation: int,
    identity_hash: str,
    strong_ids: Mapping[str, str] = {},
) -> str | None:
    """The item holding ``identity_hash`` in ``generation``, or None (no servable key,
    or contradicted by strong identifiers). See ``lookup``."""
    found = lookup(tx, tenant_id, catalog_id, class_id, generation, identity_hash, strong_ids)
    return found.item_id if found.outcome == "match" else None
