"""Item identity (INV-02): identity-rule generations, identity keys and lookups.

A class's identity rule names the claim fields whose normalized values identify an
item (``("brand", "mpn")``, later perhaps ``("gtin",)``). Rules change by
*generation*: a new generation is created (``backfilling``), its keys are computed
for every active item of the class (``ready``; hashes shared by several items become
collision candidates, kept apart from the keys), a decision resolves each collision,
and a human approves the activation (``active``; the previous generation becomes
``retired``). Generations coexist: each keeps its own keys, so a capture pinned to
the generation active when it arrived, and any replay of it, looks up in that one.

Normalization (``normalize_claim``): Unicode NFKC, whitespace collapsed to single
spaces and trimmed, casefolded. A GTIN-family field (``GTIN_FIELDS``) keeps only its
digits (spaces and hyphens dropped), must have a GTIN's length (8, 12, 13 or 14
digits) and a valid GS1 check digit, and is padded with leading zeros to the
canonical 14. A value that normalizes to nothing, an invalid GTIN, or a missing
field gives no identity (``None``): such an item holds no key in that generation.

``identity_hash`` is the SHA-256 (hex) of the JSON array ``[[field, value], …]`` in
rule order: JSON quoting makes the encoding unambiguous whatever the values contain.

How other changes meet identity:
- a decision that creates an item in the active generation adds ``AssignIdentity``;
  PostgreSQL's unique index decides a race for the same hash (``IdentityConflict``);
- keys are not recomputed when an item's attributes change, and a split or
  retirement does not release the source's keys by itself: add ``ReleaseIdentity``
  to such a decision to free the hash. Lookups report the holder's status, and a
  mapping onto a non-active item is refused anyway (INV-01);
- splits are immediate in this domain (there is no pending split to wait for). A
  split or any other item change after a generation's backfill makes the backfill
  stale: activation recomputes every active item's hash under the cursor lock and
  refuses with ``BackfillStale`` until the backfill is run again.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import psycopg.errors

from db.repositories import catalog_items as items
from db.repositories import identity as repo
from db.repositories.identity import GenerationKey, GenerationRow
from db.unit_of_work import Transaction, UnitOfWork
from producers.resolver.exceptions import (
    BackfillIncomplete,
    BackfillStale,
    CollisionAlreadyResolved,
    CollisionNotFound,
    GenerationAlreadyActivated,
    GenerationConflict,
    GenerationNotActive,
    GenerationNotFound,
    GenerationNotReady,
    HumanApprovalRequired,
    IdentityConflict,
    InvalidCollisionResolution,
    InvalidIdentity,
    ItemNotFound,
    StaleRevision,
    StrongIdMismatch,
    TargetNotActive,
    UnresolvedCollisions,
)
from producers.resolver.facts import DecisionScope

GTIN_FIELDS = frozenset({"gtin", "gtin8", "gtin12", "gtin13", "gtin14", "ean", "upc"})
"""Claim fields (and strong-identifier schemes) holding a GTIN; as a strong
identifier every one of them is the scheme ``gtin``."""

GTIN_SCHEME = "gtin"
ACTIVATE_ACTION = "approve_identity_generation"
RESOLVE_ACTION = "resolve_identity_collision"

_WHITESPACE = re.compile(r"\s+")
_GTIN_NOISE = re.compile(r"[\s\-]")
_HASH = re.compile(r"[0-9a-f]{64}")


# --- rules and hashes (pure) ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IdentityRule:
    """The claim fields whose normalized values, in this order, identify an item."""

    fields: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.fields:
            raise InvalidIdentity("an identity rule needs at least one field")
        if any(not f or f != f.strip() for f in self.fields):
            raise InvalidIdentity(f"identity rule fields must be non-blank names: {self.fields}")
        if len(set(self.fields)) != len(self.fields):
            raise InvalidIdentity(f"identity rule names a field twice: {self.fields}")


def normalize_text(value: str) -> str | None:
    """NFKC, whitespace collapsed and trimmed, casefolded; None if nothing is left."""
    text = _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", value)).strip().casefold()
    return text or None


def gtin_check_digit_valid(gtin14: str) -> bool:
    """GS1 check digit of a 14-digit GTIN: weights 3, 1, 3, … from the left."""
    total = sum(int(d) * (3 if i % 2 == 0 else 1) for i, d in enumerate(gtin14[:13]))
    return (10 - total % 10) % 10 == int(gtin14[13])


def normalize_gtin(value: str) -> str | None:
    """The canonical 14-digit GTIN, or None if ``value`` is not a valid GTIN.

    A GTIN has 8, 12, 13 or 14 digits (more only as extra leading zeros), not all
    zeros, and a valid check digit; shorter forms are padded with leading zeros.
    """
    digits = _GTIN_NOISE.sub("", unicodedata.normalize("NFKC", value))
    if not (digits.isascii() and digits.isdigit()):
        return None
    if len(digits) > 14:
        if digits[:-14].strip("0"):
            return None
        digits = digits[-14:]
    if len(digits) not in (8, 12, 13, 14) or not digits.strip("0"):
        return None
    gtin = digits.zfill(14)
    return gtin if gtin_check_digit_valid(gtin) else None


def normalize_claim(field_name: str, value: object) -> str | None:
    """A claim value as the identity hash sees it; None gives no identity."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = str(value)
    return normalize_gtin(text) if field_name in GTIN_FIELDS else normalize_text(text)


def identity_hash(rule: IdentityRule, claims: Mapping[str, str]) -> str | None:
    """SHA-256 hex of the rule's normalized claim values; None when one is missing,
    blank or (for a GTIN) invalid."""
    pairs = []
    for name in rule.fields:
        value = normalize_claim(name, claims.get(name))
        if value is None:
            return None
        pairs.append([name, value])
    encoded = json.dumps(pairs, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(encoded.encode()).hexdigest()


def normalize_strong_id(scheme: str, value: str) -> tuple[str, str] | None:
    """``(scheme, value)`` normalized: every GTIN-family scheme becomes ``gtin`` with
    the canonical 14 digits; other schemes are casefolded text. None if unusable."""
    name = normalize_text(scheme)
    if name is None:
        return None
    if name in GTIN_FIELDS:
        gtin = normalize_gtin(value)
        return (GTIN_SCHEME, gtin) if gtin else None
    text = normalize_text(value)
    return (name, text) if text else None


def strong_ids_of(attributes: Mapping[str, object]) -> dict[str, str]:
    """The strong identifiers an item's attributes carry (the GTIN family)."""
    found: dict[str, str] = {}
    for name in sorted(GTIN_FIELDS & set(attributes)):
        value = attributes[name]
        if isinstance(value, str | int) and not isinstance(value, bool):
            normalized = normalize_strong_id(name, str(value))
            if normalized is not None:
                found.setdefault(*normalized)
    return found


def _check_hash(value: str) -> None:
    if not _HASH.fullmatch(value):
        raise InvalidIdentity(f"identity hash {value!r} is not 64 lowercase hex digits")


# --- generations ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Generation:
    tenant_id: str
    catalog_id: str
    class_id: str
    generation: int
    rule: IdentityRule
    status: str

    @classmethod
    def of(cls, row: GenerationRow) -> Generation:
        k = row.key
        return cls(
            k.tenant_id,
            k.catalog_id,
            k.class_id,
            k.generation,
            IdentityRule(row.rule_fields),
            row.status,
        )


def pinned_generation(
    tx: Transaction, tenant_id: str, catalog_id: str, class_id: str, at: datetime
) -> Generation | None:
    """The generation that was active at ``at`` (None before the class had one).

    A capture pins the generation active when it arrived. Record the pinned number
    with the capture's work and replay with it: an activation stamps its time while
    its transaction runs, so a capture arriving just before that commit may read
    the older generation here first and the newer one if asked again later.
    """
    if at.utcoffset() is None:
        raise InvalidIdentity("the pinning time must be timezone-aware")
    row = repo.generation_at(tx, tenant_id, catalog_id, class_id, at)
    return Generation.of(row) if row else None


def create_generation(
    uow: UnitOfWork, tenant_id: str, catalog_id: str, class_id: str, rule: IdentityRule
) -> GenerationRow:
    """Create the class's next generation, status ``backfilling``; commits.

    One statement, so a crash leaves either nothing or the new generation with no
    keys, which ``backfill_generation`` then fills.
    """
    try:
        row = repo.insert_next_generation(uow.tx, tenant_id, catalog_id, class_id, rule.fields)
    except psycopg.errors.UniqueViolation as exc:
        raise GenerationConflict(
            f"another generation of class {class_id!r} was created at the same time; retry"
        ) from exc
    uow.commit()
    return row


@dataclass(frozen=True, slots=True)
class BackfillReport:
    generation: GenerationRow
    item_count: int
    key_count: int
    collision_count: int
    unkeyed_item_count: int


def backfill_generation(
    uow: UnitOfWork, tenant_id: str, catalog_id: str, class_id: str, generation: int
) -> BackfillReport:
    """Compute the generation's keys from the class's active items; commits.

    1. lock the generation row FOR UPDATE: serializes this backfill with another
       backfill, a collision resolution or an activation of the same generation;
       refuse one that was ever activated (its keys are history);
    2. delete an earlier run's keys, candidates and collisions (all never served);
    3. hash every active item of the class under the generation's rule;
    4. insert a ``ready`` key for each hash held by one item, and an unresolved
       collision with its candidates for each hash held by several;
    5. record the items' strong identifiers (an item's first value per scheme stays);
    6. mark the generation ``ready`` (revision + 1) and COMMIT.
    One transaction: a crash at any step leaves the generation as it was before
    (``backfilling`` with no keys, or ``ready`` with the previous run's rows); run
    it again. Items are read without the stream's cursor lock, so writers are not
    held up; an item written meanwhile makes the backfill stale, which activation
    detects (``BackfillStale``). An approval of the same generation arriving during
    the backfill waits for it while holding the cursor lock, so that catalog's
    writers wait too: approve after the backfill answered.
    """
    key = GenerationKey(tenant_id, catalog_id, class_id, generation)
    tx = uow.tx
    row = _generation_for_update(tx, key)
    if row.status in ("active", "retired"):
        raise GenerationAlreadyActivated(f"{_name(key)} is {row.status}; its keys are history")
    repo.clear_backfill(tx, key)

    rule = IdentityRule(row.rule_fields)
    by_hash: dict[str, list[str]] = defaultdict(list)
    found = repo.active_items_of_class(tx, tenant_id, catalog_id, class_id)
    unkeyed = 0
    for item_id, attributes in found:
        digest = identity_hash(rule, attributes)
        if digest is None:
            unkeyed += 1
        else:
            by_hash[digest].append(item_id)
    holders = {ids[0]: digest for digest, ids in by_hash.items() if len(ids) == 1}
    shared = {digest: ids for digest, ids in by_hash.items() if len(ids) > 1}
    repo.insert_keys(tx, key, holders, "ready")
    repo.insert_collisions(tx, key, shared)
    repo.insert_strong_ids(
        tx,
        tenant_id,
        catalog_id,
        [
            (item_id, scheme, value)
            for item_id, attributes in found
            for scheme, value in strong_ids_of(attributes).items()
        ],
    )
    repo.mark_backfilled(tx, key, len(found))
    done = repo.get_generation(tx, key)
    assert done is not None
    uow.commit()
    return BackfillReport(done, len(found), len(holders), len(shared), unkeyed)


def create_and_backfill(
    new_uow: Callable[[], UnitOfWork],
    tenant_id: str,
    catalog_id: str,
    class_id: str,
    rule: IdentityRule,
) -> BackfillReport:
    """Create a generation, then backfill it: two transactions.

    1. ``create_generation`` commits the generation (``backfilling``);
    2. ``backfill_generation`` computes its keys and commits (``ready``).
    A crash between them leaves a ``backfilling`` generation without keys: it can
    never be activated (``BackfillIncomplete``) until its backfill is run again.
    """
    with new_uow() as uow:
        created = create_generation(uow, tenant_id, catalog_id, class_id, rule)
    with new_uow() as uow:
        return backfill_generation(uow, tenant_id, catalog_id, class_id, created.key.generation)


def _generation_for_update(tx: Transaction, key: GenerationKey) -> GenerationRow:
    row = repo.get_generation(tx, key, lock="update")
    if row is None:
        raise GenerationNotFound(f"no {_name(key)}")
    return row


def _name(key: GenerationKey) -> str:
    return (
        f"identity generation {key.generation} of class {key.class_id!r}"
        f" in {key.tenant_id}/{key.catalog_id}"
    )


def _check_backfill_current(tx: Transaction, row: GenerationRow) -> None:
    """Refuse unless the generation's keys and candidates are exactly what the
    class's active items hash to now (every item keyed or a candidate, no key or
    candidate left on an item that changed, was split or was retired)."""
    k = row.key
    rule = IdentityRule(row.rule_fields)
    expected = set()
    for item_id, attributes in repo.active_items_of_class(
        tx, k.tenant_id, k.catalog_id, k.class_id
    ):
        digest = identity_hash(rule, attributes)
        if digest is not None:
            expected.add((item_id, digest))
    recorded = set(repo.keys_by_item(tx, k).items()) | set(repo.candidates_by_item(tx, k).items())
    if expected != recorded:
        missing = sorted({item for item, _ in expected - recorded})
        extra = sorted({item for item, _ in recorded - expected})
        raise BackfillStale(
            f"{_name(k)} is stale: items without their key {missing[:10]}, keys or candidates"
            f" no longer right {extra[:10]}; run its backfill again"
        )


# --- facts a decision accepts --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ActivateGeneration:
    """Approve and activate a ready generation; the decision is the recorded human
    approval, made against the generation's ``expected_revision``."""

    class_id: str
    generation: int
    expected_revision: int

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        activate_generation(uow, scope, self)


def activate_generation(uow: UnitOfWork, scope: DecisionScope, fact: ActivateGeneration) -> None:
    """Activate the generation inside ``record_decision`` (which holds the stream's
    cursor lock, so no item of the catalog changes meanwhile).

    1. lock the generation row FOR UPDATE: serializes the activation with a backfill
       or a collision resolution of the same generation, which do not take the
       cursor lock;
    2. require it ``ready`` (not backfilling, never activated), the decision human,
       the revision the approver saw, no unresolved collision;
    3. lock the class's active generation FOR UPDATE: waits for key assignments in
       it (they hold it FOR SHARE), so none lands after its keys are retired;
    4. require the backfill current: every active item's hash matches its key or
       candidate row;
    5. at one clock time, retire the previous generation (and its active keys) and
       activate this one (and its ready keys), naming the decision.
    The decision, the generations and the keys commit together or not at all.
    """
    key = GenerationKey(scope.tenant_id, scope.catalog_id, fact.class_id, fact.generation)
    tx = uow.tx
    row = _generation_for_update(tx, key)
    if row.status == "backfilling":
        raise BackfillIncomplete(f"{_name(key)} is still backfilling")
    if row.status != "ready":
        raise GenerationNotReady(f"{_name(key)} is {row.status}, not ready")
    kind = repo.decision_actor_kind(tx, scope.tenant_id, scope.catalog_id, scope.decision_id)
    if kind != "human":
        raise HumanApprovalRequired(f"activating {_name(key)} needs a human decision, not {kind}")
    if row.revision != fact.expected_revision:
        raise StaleRevision(
            f"{_name(key)} is at revision {row.revision}, the approval was made against"
            f" {fact.expected_revision}: review it again"
        )
    unresolved = repo.unresolved_collision_count(tx, key)
    if unresolved:
        raise UnresolvedCollisions(f"{_name(key)} has {unresolved} unresolved collision(s)")
    previous = repo.active_generation_for_update(
        tx, scope.tenant_id, scope.catalog_id, fact.class_id
    )
    _check_backfill_current(tx, row)
    at = repo.clock(tx)
    if previous is not None:
        repo.retire(tx, previous.key, at)
    repo.activate(tx, key, scope.decision_id, at)


@dataclass(frozen=True, slots=True)
class ResolveCollision:
    """Resolve a collision of a ready generation: ``holder_item_id`` (one of the
    candidates) holds the key; None: no item holds this hash in the generation.
    The other candidates stay without a key in it (a split or merge is its own
    decision)."""

    class_id: str
    generation: int
    identity_hash: str
    holder_item_id: str | None

    def __post_init__(self) -> None:
        _check_hash(self.identity_hash)

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        resolve_collision(uow, scope, self)


def resolve_collision(uow: UnitOfWork, scope: DecisionScope, fact: ResolveCollision) -> None:
    """Record the resolution inside ``record_decision``.

    1. lock the generation row FOR UPDATE (serializes with backfill and activation
       of the generation, which would otherwise replace or freeze the collision);
    2. require the generation ``ready``, the collision unresolved, the holder one of
       its candidates;
    3. insert the holder's ``ready`` key naming the decision, mark the collision
       resolved, move the generation's revision (an approval must see this state).
    """
    key = GenerationKey(scope.tenant_id, scope.catalog_id, fact.class_id, fact.generation)
    tx = uow.tx
    row = _generation_for_update(tx, key)
    if row.status == "backfilling":
        raise BackfillIncomplete(f"{_name(key)} is still backfilling")
    if row.status != "ready":
        raise GenerationAlreadyActivated(f"{_name(key)} is {row.status}; its keys are history")
    found = repo.collisions(tx, key, fact.identity_hash)
    if not found:
        raise CollisionNotFound(f"no collision {fact.identity_hash} in {_name(key)}")
    collision = found[0]
    if collision.resolved_at is not None:
        raise CollisionAlreadyResolved(f"collision {fact.identity_hash} is already resolved")
    if fact.holder_item_id is not None:
        if fact.holder_item_id not in collision.candidate_item_ids:
            raise InvalidCollisionResolution(
                f"{fact.holder_item_id!r} is not a candidate of collision {fact.identity_hash}:"
                f" {list(collision.candidate_item_ids)}"
            )
        repo.insert_keys(
            tx, key, {fact.holder_item_id: fact.identity_hash}, "ready", scope.decision_id
        )
    resolved = repo.resolve_collision(
        tx, key, fact.identity_hash, fact.holder_item_id, scope.decision_id
    )
    assert resolved, "the generation lock keeps the collision unresolved until here"
    repo.bump_revision(tx, key)


@dataclass(frozen=True, slots=True)
class AssignIdentity:
    """Give ``item_id`` the key ``identity_hash`` in the (active) ``generation`` of
    its class, and record its strong identifiers. Used by a decision that creates an
    item; the hash is the one the caller computed from its claims with
    ``identity_hash`` (it is not recomputed from the item's attributes)."""

    item_id: str
    class_id: str
    generation: int
    identity_hash: str
    strong_ids: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_hash(self.identity_hash)

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        assign_identity(uow, scope, self)


def assign_identity(uow: UnitOfWork, scope: DecisionScope, fact: AssignIdentity) -> None:
    """Insert the item's active key, inside ``record_decision``.

    1. lock the generation FOR SHARE and require it active: an activation of the
       next generation (FOR UPDATE on this row) waits for this transaction, so the
       key is retired with its generation, never left active in a retired one;
    2. share-lock the item (it stays as it is until commit) and require it active
       and of the generation's class;
    3. check and record its strong identifiers;
    4. insert the key. The unique index decides a race for the same hash, even with
       a writer that holds another cursor lock or none: the second insert waits for
       the first transaction and fails if it commits (``IdentityConflict``).
    """
    key = GenerationKey(scope.tenant_id, scope.catalog_id, fact.class_id, fact.generation)
    tx = uow.tx
    row = repo.get_generation(tx, key, lock="share")
    if row is None:
        raise GenerationNotFound(f"no {_name(key)}")
    if row.status != "active":
        raise GenerationNotActive(f"{_name(key)} is {row.status}; keys go to the active one")
    item = items.get_for_share(tx, scope.tenant_id, scope.catalog_id, fact.item_id)
    if item is None:
        raise ItemNotFound(f"no item {fact.item_id!r} in {scope.tenant_id}/{scope.catalog_id}")
    if item.status != "active":
        raise TargetNotActive(f"item {fact.item_id!r} is {item.status}, not active")
    if item.class_id != fact.class_id:
        raise InvalidIdentity(
            f"item {fact.item_id!r} is of class {item.class_id!r}, not {fact.class_id!r}"
        )
    _record_strong_ids(tx, scope, fact.item_id, fact.strong_ids)
    try:
        repo.insert_keys(tx, key, {fact.item_id: fact.identity_hash}, "active", scope.decision_id)
    except psycopg.errors.UniqueViolation as exc:
        if exc.diag.constraint_name == "identity_key_unique_hash":
            raise IdentityConflict(
                f"another item already holds identity {fact.identity_hash} in {_name(key)}"
            ) from exc
        raise IdentityConflict(
            f"item {fact.item_id!r} already holds a key in {_name(key)}"
        ) from exc


def _record_strong_ids(
    tx: Transaction, scope: DecisionScope, item_id: str, claimed: Mapping[str, str]
) -> None:
    normalized = {}
    for scheme, value in claimed.items():
        pair = normalize_strong_id(scheme, value)
        if pair is None:
            raise InvalidIdentity(f"strong identifier {scheme}={value!r} is not usable")
        normalized[pair[0]] = pair[1]
    recorded = repo.strong_ids(tx, scope.tenant_id, scope.catalog_id, item_id)
    for scheme, value in normalized.items():
        if recorded.get(scheme, value) != value:
            raise StrongIdMismatch(f"item {item_id!r} has {scheme} {recorded[scheme]}, not {value}")
    repo.insert_strong_ids(
        tx, scope.tenant_id, scope.catalog_id, [(item_id, s, v) for s, v in normalized.items()]
    )


@dataclass(frozen=True, slots=True)
class ReleaseIdentity:
    """Release every ready or active key ``item_id`` holds, so the hash is free for
    another item; released keys are never served. Keys of retired generations stay
    as they were. Retiring or splitting an item releases its keys by itself; this
    fact is for a reviewer moving an identity off an item that stays active."""

    item_id: str

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        repo.release_keys(uow.tx, scope.tenant_id, scope.catalog_id, self.item_id)


# --- lookups -------------------------------------------------------------------------


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


def lookup(
    tx: Transaction,
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
    is never a match.
    """
    _check_hash(identity_hash)
    key = GenerationKey(tenant_id, catalog_id, class_id, generation)
    found = repo.find_key(tx, key, identity_hash)
    if found is None:
        return IdentityLookup("no_key")
    holder = found.item_id
    recorded = repo.strong_ids(tx, tenant_id, catalog_id, holder)
    conflicts = []
    for scheme, value in strong_ids.items():
        pair = normalize_strong_id(scheme, value)
        if pair is None:
            continue  # an unusable claimed identifier narrows nothing
        name, normalized = pair
        if name in recorded:
            if recorded[name] != normalized:
                conflicts.append(name)
        elif repo.strong_id_holders(tx, tenant_id, catalog_id, name, normalized):
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
