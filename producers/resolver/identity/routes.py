"""The identity-generation endpoints of the resolver's operator API (INV-02).

Create a generation (and backfill it), read generations and their collisions,
re-run a backfill, resolve a collision, and approve an activation. Resolutions and
approvals are decisions: they run through ``record_decision`` like every accepted
change, with ``actor_kind`` human (the body names the person; operator tokens name
tenants). Thin, like ``producers.resolver.routes``: authorize the tenant, build the
domain's fact, run it.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from db.repositories.identity import GenerationKey
from producers.http.deps import Conn, Res
from producers.resolver.decisions import Decision, record_decision
from producers.resolver.facts import Fact
from producers.resolver.http_models import DecisionBasis, DecisionRecordedBody
from producers.resolver.identity import queries
from producers.resolver.identity.facts import (
    ACTIVATE_ACTION,
    RESOLVE_ACTION,
    ActivateGeneration,
    ResolveCollision,
)
from producers.resolver.identity.generations import backfill_generation, create_and_backfill
from producers.resolver.identity.http_models import (
    ApprovalRequest,
    Backfill,
    Generation,
    GenerationDetail,
    GenerationList,
    GenerationRequest,
    ResolutionRequest,
)
from producers.resolver.identity.http_models import Collision as CollisionBody
from schemas.http.auth import Operator, Viewer
from schemas.http.errors import error_responses
from schemas.http.params import Catalog, ClassId, GenerationNumber, IdentityHash, Tenant

router = APIRouter(prefix="/v1", tags=["identity"], responses=error_responses(401, 403, 422, 503))

GENERATIONS = "/tenants/{tenant_id}/catalogs/{catalog_id}/identity-generations"
# Class ids may contain '/', so the class takes every segment up to the numeric
# generation (Starlette's path and int convertors).
GENERATION = GENERATIONS + "/{class_id:path}/{generation:int}"


def _record(
    res: Res, tenant_id: str, catalog_id: str, basis: DecisionBasis, action: str, fact: Fact
) -> DecisionRecordedBody:
    decision = Decision(
        tenant_id=tenant_id,
        catalog_id=catalog_id,
        action=action,
        actor=basis.actor,
        rationale=basis.rationale,
        evidence=tuple(e.to_domain() for e in basis.evidence),
        facts=(fact,),
        actor_kind="human",
        prior_decision_ids=tuple(dict.fromkeys(basis.prior_decision_ids)),
    )
    with res.unit_of_work() as uow:
        return DecisionRecordedBody.model_validate(record_decision(uow, decision))


@router.post(
    GENERATIONS,
    summary="Create a class's next identity generation and backfill it",
    status_code=status.HTTP_201_CREATED,
    responses=error_responses(409),
)
def create(
    caller: Operator,
    res: Res,
    conn: Conn,
    tenant_id: Tenant,
    catalog_id: Catalog,
    body: GenerationRequest,
) -> Backfill:
    """Two transactions: the generation is created (``backfilling``), then its keys
    are computed from every active item of the class (``ready``): hashes one item
    holds become ready keys, shared ones collisions to resolve. Nothing is served
    until a human approves the activation. If the backfill fails after the creation
    committed, the generation stays ``backfilling``: run ``…/backfill``.

    422 ``INVALID_IDENTITY`` (blank or repeated field names), ``UNKNOWN_IDENTITY_FIELD``
    (a field no item of the class can have: no capture states it and no active item
    carries it; nothing is stored); 409 ``GENERATION_CONFLICT`` (another generation
    of the class was created at the same moment: retry)."""
    caller.require_tenant(tenant_id)
    rule = body.rule()
    report = create_and_backfill(
        res.unit_of_work, tenant_id, catalog_id, body.class_id, rule, res.claim_fields
    )
    state = queries.generation_state(conn, report.generation.key)
    return Backfill.of(report, state)


@router.get(GENERATIONS, summary="List identity generations")
def list_generations(
    caller: Viewer,
    conn: Conn,
    tenant_id: Tenant,
    catalog_id: Catalog,
    class_id: Annotated[
        str | None, Query(min_length=1, max_length=200, description="Only this class.")
    ] = None,
) -> GenerationList:
    caller.require_tenant(tenant_id)
    states = queries.list_generations(conn, tenant_id, catalog_id, class_id)
    return GenerationList(generations=[Generation.of(s) for s in states])


@router.get(
    GENERATION,
    summary="Read an identity generation with its collisions",
    responses=error_responses(404),
)
def read_generation(
    caller: Viewer,
    conn: Conn,
    tenant_id: Tenant,
    catalog_id: Catalog,
    class_id: ClassId,
    generation: GenerationNumber,
) -> GenerationDetail:
    """404 ``GENERATION_NOT_FOUND``."""
    caller.require_tenant(tenant_id)
    key = GenerationKey(tenant_id, catalog_id, class_id, generation)
    found = queries.read_generation(conn, key)
    return GenerationDetail(
        **Generation.of(found.state).model_dump(),
        collisions=[CollisionBody.model_validate(c) for c in found.collisions],
    )


@router.post(
    GENERATION + "/backfill",
    summary="Run a generation's backfill again (never-activated generations only)",
    responses=error_responses(404, 409),
)
def backfill(
    caller: Operator,
    res: Res,
    conn: Conn,
    tenant_id: Tenant,
    catalog_id: Catalog,
    class_id: ClassId,
    generation: GenerationNumber,
) -> Backfill:
    """Replaces the generation's keys and collisions (their resolutions too) with
    what the class's active items hash to now, in one transaction; needed after a
    crash left it ``backfilling`` or when an approval answered ``BACKFILL_STALE``.

    404 ``GENERATION_NOT_FOUND``; 409 ``GENERATION_ALREADY_ACTIVATED``."""
    caller.require_tenant(tenant_id)
    with res.unit_of_work() as uow:
        report = backfill_generation(uow, tenant_id, catalog_id, class_id, generation)
    state = queries.generation_state(conn, report.generation.key)
    return Backfill.of(report, state)


@router.post(
    GENERATION + "/collisions/{identity_hash}/resolution",
    summary="Resolve a collision: name the candidate that holds the key, or none",
    status_code=status.HTTP_201_CREATED,
    responses=error_responses(404, 409),
)
def resolve(
    caller: Operator,
    res: Res,
    tenant_id: Tenant,
    catalog_id: Catalog,
    class_id: ClassId,
    generation: GenerationNumber,
    identity_hash: IdentityHash,
    body: ResolutionRequest,
) -> DecisionRecordedBody:
    """A decision with action ``resolve_identity_collision``; moves the generation's
    revision. 404 ``GENERATION_NOT_FOUND``, ``COLLISION_NOT_FOUND``; 409
    ``COLLISION_ALREADY_RESOLVED``, ``BACKFILL_INCOMPLETE``,
    ``GENERATION_ALREADY_ACTIVATED``; 422 ``INVALID_COLLISION_RESOLUTION`` (the holder
    is not a candidate)."""
    caller.require_tenant(tenant_id)
    fact = ResolveCollision(class_id, generation, identity_hash, body.holder_item_id)
    return _record(res, tenant_id, catalog_id, body, RESOLVE_ACTION, fact)


@router.post(
    GENERATION + "/approval",
    summary="Approve and activate an identity generation (a human decision)",
    status_code=status.HTTP_201_CREATED,
    responses=error_responses(404, 409),
)
def approve(
    caller: Operator,
    res: Res,
    tenant_id: Tenant,
    catalog_id: Catalog,
    class_id: ClassId,
    generation: GenerationNumber,
    body: ApprovalRequest,
) -> DecisionRecordedBody:
    """Records the approval as a decision with action ``approve_identity_generation``
    and, in the same transaction, makes the generation ``active`` (its keys are
    served from then on) and retires the class's previous one (its keys stay, for
    replays pinned to it). The answer's ``decision_id`` is the recorded approval.

    409 ``BACKFILL_INCOMPLETE`` (still backfilling), ``UNRESOLVED_COLLISIONS``,
    ``BACKFILL_STALE`` (items changed since the backfill: run it again),
    ``GENERATION_NOT_READY`` (already active or retired), ``STALE_REVISION`` (the
    generation changed since the approver read ``revision``); 404
    ``GENERATION_NOT_FOUND``; 422 ``VALIDATION_FAILED`` (no evidence, among others),
    ``PRIOR_DECISION_NOT_FOUND``."""
    caller.require_tenant(tenant_id)
    fact = ActivateGeneration(class_id, generation, body.expected_revision)
    return _record(res, tenant_id, catalog_id, body, ACTIVATE_ACTION, fact)
