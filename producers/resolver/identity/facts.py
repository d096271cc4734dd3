"""The identity facts a decision accepts (INV-02): activating a generation,
resolving a collision, assigning and releasing keys.

Each applies itself inside ``record_decision``'s transaction (the ``Fact``
protocol). How other changes meet identity:
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

from collections.abc import Mapping
from dataclasses import dataclass, field

import psycopg.errors

from db.repositories import catalog_items as items
from db.repositories import identity as repo
from db.repositories import strong_ids as strong
from db.repositories.identity import GenerationKey, GenerationRow
from db.unit_of_work import Transaction, UnitOfWork
from producers.resolver.exceptions import (
    BackfillIncomplete,
    CollisionAlreadyResolved,
    CollisionNotFound,
    GenerationAlreadyActivated,
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
from producers.resolver.identity.generations import (
    check_backfill_current,
    generation_for_update,
    generation_name,
)
from producers.resolver.identity.rules import check_hash, normalize_strong_id

ACTIVATE_ACTION = "approve_identity_generation"
RESOLVE_ACTION = "resolve_identity_collision"


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
    row = generation_for_update(tx, key)
    if row.status == "backfilling":
        raise BackfillIncomplete(f"{generation_name(key)} is still backfilling")
    if row.status != "ready":
        raise GenerationNotReady(f"{generation_name(key)} is {row.status}, not ready")
    kind = repo.decision_actor_kind(tx, scope.tenant_id, scope.catalog_id, scope.decision_id)
    if kind != "human":
        raise HumanApprovalRequired(
            f"activating {generation_name(key)} needs a human decision, not {kind}"
        )
    if row.revision != fact.expected_revision:
        raise StaleRevision(
            f"{generation_name(key)} is at revision {row.revision}, the approval was made against"
            f" {fact.expected_revision}: review it again"
        )
    unresolved = repo.unresolved_collision_count(tx, key)
    if unresolved:
        raise UnresolvedCollisions(
            f"{generation_name(key)} has {unresolved} unresolved collision(s)"
        )
    previous = repo.active_generation_for_update(
        tx, scope.tenant_id, scope.catalog_id, fact.class_id
    )
    check_backfill_current(tx, row)
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
        check_hash(self.identity_hash)

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
    row = generation_for_update(tx, key)
    if row.status == "backfilling":
        raise BackfillIncomplete(f"{generation_name(key)} is still backfilling")
    if row.status != "ready":
        raise GenerationAlreadyActivated(
            f"{generation_name(key)} is {row.status}; its keys are history"
        )
    found = repo.collisions(tx, key, fact.identity_hash)
    if not found:
        raise CollisionNotFound(f"no collision {fact.identity_hash} in {generation_name(key)}")
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
        check_hash(self.identity_hash)

    def accept(self, uow: UnitOfWork, scope: DecisionScope) -> None:
        assign_identity(uow, scope, self)


def _share_locked(key: GenerationKey) -> tuple[object, ...]:
    return ("generation_for_share", *key.params())


def remember_share_locked(uow: UnitOfWork, row: GenerationRow) -> None:
    """Record a generation ``uow``'s transaction read FOR SHARE, so ``assign_identity``
    takes it from there instead of reading and locking it again."""
    uow.memo[_share_locked(row.key)] = row


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
    # Share-locked once per transaction: held until it ends, the row cannot change, so
    # a later fact of the same transaction (a batch of the capture worker's) reads it
    # from the memo.
    memo = _share_locked(key)
    if memo not in uow.memo:
        uow.memo[memo] = repo.get_generation(tx, key, lock="share")
    row = uow.memo[memo]
    if row is None:
        raise GenerationNotFound(f"no {generation_name(key)}")
    if row.status != "active":
        raise GenerationNotActive(
            f"{generation_name(key)} is {row.status}; keys go to the active one"
        )
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
                f"another item already holds identity {fact.identity_hash}"
                f" in {generation_name(key)}"
            ) from exc
        raise IdentityConflict(
            f"item {fact.item_id!r} already holds a key in {generation_name(key)}"
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
    recorded = strong.strong_ids(tx, scope.tenant_id, scope.catalog_id, item_id)
    for scheme, value in normalized.items():
        if recorded.get(scheme, value) != value:
            raise StrongIdMismatch(f"item {item_id!r} has {scheme} {recorded[scheme]}, not {value}")
    strong.insert_strong_ids(
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
