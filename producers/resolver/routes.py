"""The resolver's operator endpoints (issue 3): review cases, decisions on them, an
item's decision history, splits.

Thin: each route authorizes the tenant, builds the domain's ``Decision`` from the
body and runs ``record_decision`` in a Unit of Work, or calls one read of
``producers.resolver.queries``. Domain errors carry their own stable code and status.
Identity generations, their collisions and the approval of their activation are
served by ``producers.resolver.identity.routes``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, status

from producers.http.deps import Conn, Res
from producers.resolver import queries
from producers.resolver.decisions import Decision, Recorded, record_decision
from producers.resolver.facts import Fact
from producers.resolver.http_models import (
    CaseDetail,
    CasePage,
    DecisionBasis,
    DecisionBody,
    DecisionHistory,
    DecisionRecordedBody,
    DecisionRequest,
    ReviewCase,
    SplitRequest,
    split_fact,
)
from producers.resolver.review_cases import CaseRevision
from schemas.http.auth import Operator, Viewer
from schemas.http.errors import error_responses
from schemas.http.params import CaseId, Catalog, ItemId, Tenant

router = APIRouter(prefix="/v1", responses=error_responses(401, 403, 422, 503))

MAX_PAGE = 200
DEFAULT_PAGE = 50

CATALOG = "/tenants/{tenant_id}/catalogs/{catalog_id}"
CASES = CATALOG + "/review-cases"
CASE = CASES + "/{case_id}"
ITEM = CATALOG + "/items/{item_id}"

_WRITE_ERRORS = error_responses(404, 409)


def _record(
    res: Res,
    tenant_id: str,
    catalog_id: str,
    basis: DecisionBasis,
    action: str,
    facts: tuple[Fact, ...],
    case: CaseRevision | None,
) -> DecisionRecordedBody:
    """Build the decision (its checks run here) and record it in one Unit of Work."""
    decision = Decision(
        tenant_id=tenant_id,
        catalog_id=catalog_id,
        action=action,
        actor=basis.actor,
        rationale=basis.rationale,
        evidence=tuple(e.to_domain() for e in basis.evidence),
        facts=facts,
        actor_kind="human",
        case=case,
        prior_decision_ids=tuple(dict.fromkeys(basis.prior_decision_ids)),
    )
    with res.unit_of_work() as uow:
        recorded: Recorded = record_decision(uow, decision)
    return DecisionRecordedBody.model_validate(recorded)


@router.get(CASES, tags=["review"], summary="List review cases (keyset pagination)")
def list_cases(
    caller: Viewer,
    conn: Conn,
    tenant_id: Tenant,
    catalog_id: Catalog,
    case_status: Annotated[
        Literal["open", "decided"] | None,
        Query(alias="status", description="Only cases in this status."),
    ] = None,
    after: Annotated[
        str | None,
        Query(min_length=1, max_length=200, description="The previous page's `next_after`."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="At most this many.")] = (
        DEFAULT_PAGE
    ),
) -> CasePage:
    caller.require_tenant(tenant_id)
    rows = queries.list_cases(conn, tenant_id, catalog_id, case_status, after, limit)
    return CasePage(
        cases=[ReviewCase.model_validate(r) for r in rows],
        next_after=rows[-1].case_id if len(rows) == limit else None,
    )


@router.get(
    CASE,
    tags=["review"],
    summary="Read a review case: its current revision and its decisions so far",
    responses=error_responses(404),
)
def read_case(
    caller: Viewer, conn: Conn, tenant_id: Tenant, catalog_id: Catalog, case_id: CaseId
) -> CaseDetail:
    """404 ``CASE_NOT_FOUND`` for an unknown case."""
    caller.require_tenant(tenant_id)
    found = queries.read_case(conn, tenant_id, catalog_id, case_id)
    return CaseDetail(
        **ReviewCase.model_validate(found.case).model_dump(),
        decisions=[DecisionBody.model_validate(d) for d in found.decisions],
    )


@router.post(
    CASE + "/decisions",
    tags=["review"],
    summary="Decide a review case at the revision the decision was made against",
    status_code=status.HTTP_201_CREATED,
    responses=_WRITE_ERRORS,
)
def decide_case(
    caller: Operator,
    res: Res,
    tenant_id: Tenant,
    catalog_id: Catalog,
    case_id: CaseId,
    body: DecisionRequest,
) -> DecisionRecordedBody:
    """Records the decision and accepts its facts in one transaction (AW-01), with one
    outbox event per aggregate revision it changes. The actor is the body's: operator
    tokens name tenants, not people.

    409 ``STALE_REVISION`` when the case is no longer at ``expected_revision`` (someone
    decided first: read the case again); 404 ``CASE_NOT_FOUND``; the facts' invariant
    violations with their own codes: 409 ``TARGET_NOT_ACTIVE``,
    ``OVERLAPPING_POLICY_WINDOW``, ``SOURCE_NOT_ACTIVE``, ``ITEM_ALREADY_EXISTS``,
    ``PARENT_NOT_ACTIVE``; 404 ``ITEM_NOT_FOUND``; 422 ``INVALID_SPLIT``,
    ``INVALID_POLICY_WINDOW``, ``PRIOR_DECISION_NOT_FOUND``, ``VALIDATION_FAILED``
    (no evidence, among others)."""
    caller.require_tenant(tenant_id)
    return _record(
        res,
        tenant_id,
        catalog_id,
        body,
        body.action,
        body.domain_facts(),
        CaseRevision(case_id, body.expected_revision),
    )


@router.get(
    ITEM + "/decisions",
    tags=["items"],
    summary="An item's decision history, oldest first",
    responses=error_responses(404),
)
def item_decisions(
    caller: Viewer, conn: Conn, tenant_id: Tenant, catalog_id: Catalog, item_id: ItemId
) -> DecisionHistory:
    """Every decision that changed the item (created, updated, retired or split it,
    or created it as a successor) or accepted a fact resting on one of its revisions
    (a listing mapped onto it, also after the listing moved elsewhere; a variant under
    it), and the decisions on review cases whose subject is the item (subject type
    ``catalog_item``). Read from the effects each decision recorded with it. Ordered
    by decision time, then id. 404 ``ITEM_NOT_FOUND``."""
    caller.require_tenant(tenant_id)
    rows = queries.item_history(conn, tenant_id, catalog_id, item_id)
    return DecisionHistory(
        item_id=item_id, decisions=[DecisionBody.model_validate(r) for r in rows]
    )


@router.post(
    ITEM + "/split",
    tags=["items"],
    summary="Split an item into successors (a decision with action 'split')",
    status_code=status.HTTP_201_CREATED,
    responses=_WRITE_ERRORS,
)
def split(
    caller: Operator,
    res: Res,
    tenant_id: Tenant,
    catalog_id: Catalog,
    item_id: ItemId,
    body: SplitRequest,
) -> DecisionRecordedBody:
    """Records a decision with action ``split`` whose one fact splits the item: the
    source stays with status ``split``, successors are created, every listing mapped
    to the source moves per ``remaps`` (INV-08). With ``case``, the split decides that
    review case at its expected revision (409 ``STALE_REVISION`` as for any decision);
    without, it is a decision outside any case. 404 ``ITEM_NOT_FOUND``; 409
    ``SOURCE_NOT_ACTIVE``, ``ITEM_ALREADY_EXISTS``; 422 ``INVALID_SPLIT``."""
    caller.require_tenant(tenant_id)
    case = CaseRevision(body.case.case_id, body.case.expected_revision) if body.case else None
    return _record(res, tenant_id, catalog_id, body, "split", (split_fact(item_id, body),), case)
