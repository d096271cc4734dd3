"""Identity-rule generations (INV-02): pinning, creation, backfill.

A class's identity rule changes by *generation*: a new generation is created
(``backfilling``), its keys are computed for every active item of the class
(``ready``; hashes shared by several items become collision candidates, kept apart
from the keys), a decision resolves each collision, and a human approves the
activation (``active``; the previous generation becomes ``retired``). The decisions
of that lifecycle are facts (``producers.resolver.identity.facts``). Generations
coexist: each keeps its own keys, so a capture pinned to the generation active when
it arrived, and any replay of it, looks up in that one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import psycopg.errors

from db.repositories import identity as repo
from db.repositories import strong_ids as strong
from db.repositories.identity import GenerationKey, GenerationRow
from db.unit_of_work import Transaction, UnitOfWork
from producers.resolver.exceptions import (
    BackfillStale,
    GenerationAlreadyActivated,
    GenerationConflict,
    GenerationNotFound,
    InvalidIdentity,
    UnknownIdentityField,
)
from producers.resolver.identity.rules import (
    IdentityRule,
    fields_no_item_has,
    identity_hash,
    strong_ids_of,
)


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
    uow: UnitOfWork,
    tenant_id: str,
    catalog_id: str,
    class_id: str,
    rule: IdentityRule,
    claim_fields: frozenset[str],
) -> GenerationRow:
    """Create the class's next generation, status ``backfilling``; commits.

    ``claim_fields`` are the names a captured product can state (the composition
    root has them from the capture adapters' inventories).

    1. read the attribute names the class's active items carry;
    2. refuse a rule naming a field that is neither a claim field nor carried by one
       of them (``UnknownIdentityField``): nothing is written;
    3. insert the generation and COMMIT.
    A crash before the COMMIT leaves nothing; after it, the new generation with no
    keys, which ``backfill_generation`` then fills. Step 1 takes no lock: an item
    gaining the field while this runs may be missed, and a retry then succeeds.
    """
    carried = repo.attribute_names_of_class(uow.tx, tenant_id, catalog_id, class_id)
    unknown = fields_no_item_has(rule, claim_fields, carried)
    if unknown:
        raise UnknownIdentityField(
            f"the identity rule names {list(unknown)}, which no item of class {class_id!r}"
            " can have (no capture states it and no active item carries it), so it could"
            f" never match; fields a capture can state: {sorted(claim_fields)}"
        )
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
    row = generation_for_update(tx, key)
    if row.status in ("active", "retired"):
        raise GenerationAlreadyActivated(
            f"{generation_name(key)} is {row.status}; its keys are history"
        )
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
    strong.insert_strong_ids(
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
    claim_fields: frozenset[str],
) -> BackfillReport:
    """Create a generation, then backfill it: two transactions.

    1. ``create_generation`` checks the rule's fields against ``claim_fields`` and
       the class's items, and commits the generation (``backfilling``);
    2. ``backfill_generation`` computes its keys and commits (``ready``).
    A crash between them leaves a ``backfilling`` generation without keys: it can
    never be activated (``BackfillIncomplete``) until its backfill is run again.
    """
    with new_uow() as uow:
        created = create_generation(uow, tenant_id, catalog_id, class_id, rule, claim_fields)
    with new_uow() as uow:
        return backfill_generation(uow, tenant_id, catalog_id, class_id, created.key.generation)


def generation_for_update(tx: Transaction, key: GenerationKey) -> GenerationRow:
    """The generation's row, locked FOR UPDATE (what each lifecycle step serializes
    on), or ``GenerationNotFound``."""
    row = repo.get_generation(tx, key, lock="update")
    if row is None:
        raise GenerationNotFound(f"no {generation_name(key)}")
    return row


def generation_name(key: GenerationKey) -> str:
    """How messages name a generation."""
    return (
        f"identity generation {key.generation} of class {key.class_id!r}"
        f" in {key.tenant_id}/{key.catalog_id}"
    )


def check_backfill_current(tx: Transaction, row: GenerationRow) -> None:
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
            f"{generation_name(k)} is stale: items without their key {missing[:10]},"
            f" keys or candidates no longer right {extra[:10]}; run its backfill again"
        )
