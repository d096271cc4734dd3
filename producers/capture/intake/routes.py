"""The intake endpoints of the resolver API (DESIGN §10): ``POST /v1/captures`` for
collectors, ``GET /v1/receipts/{receipt_id}`` for collectors and operators.

Thin: authentication and request checks here, durability in ``service``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, cast

from fastapi import APIRouter, Depends, Header, Request, Response, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from db.resolver import intake as sql
from producers.capture.exceptions import MalformedEnvelope
from producers.capture.intake import collectors
from producers.capture.intake.captures import CaptureSubmission, IntakeService
from producers.capture.intake.collectors import Collector, CollectorVerifier
from producers.capture.intake.exceptions import (
    InstanceScopeDenied,
    MalformedRawEnvelope,
    PayloadTooLarge,
    ReceiptNotFound,
    UnsupportedMediaType,
)
from producers.capture.intake.http_models import CaptureRequest, Receipt
from producers.capture.raw import RAW_ENVELOPE_CONTENT_TYPE, decode_raw_envelope
from producers.capture.rules import MediaType
from producers.http.deps import Conn, Res
from schemas.http.auth import Principal, ViewerIfApiToken
from schemas.http.errors import error_responses
from schemas.http.exceptions import TenantScopeDenied, Unauthenticated
from schemas.http.params import ReceiptId
from schemas.jobs import CAPTURE_JOB

CAPTURES_PATH = "/v1/captures"

router = APIRouter(prefix="/v1", tags=["intake"], responses=error_responses(401, 403, 503))


@dataclass(frozen=True, slots=True)
class IntakeResources:
    """What the intake routes use, opened once per process (``producers.wiring``)."""

    verifier: CollectorVerifier
    service: IntakeService
    content_types: frozenset[str]
    max_artifact_bytes: int


def intake(request: Request) -> IntakeResources:
    return cast(IntakeResources, request.app.state.intake)


Intake = Annotated[IntakeResources, Depends(intake)]

_bearer = HTTPBearer(
    auto_error=False,
    description="Collectors: a JWT of a registered credential. Operators (receipts"
    " only): a token listed in GAPLESS_API_TOKENS.",
)
Bearer = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _token(credentials: HTTPAuthorizationCredentials | None) -> str:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthenticated("a bearer token is required", {"WWW-Authenticate": "Bearer"})
    return credentials.credentials


def _collector(token: str, res: Res, verifier: CollectorVerifier) -> Collector:
    client_id, claims = verifier.client_id(token)
    with res.pool.connection() as conn:
        return collectors.resolve(conn, client_id, claims)


def authenticate_collector(credentials: Bearer, res: Res, resources: Intake) -> Collector:
    """The calling collector instance, or 401/403. Borrows a connection only for the
    credential lookup, so none is held while the artifact uploads."""
    return _collector(_token(credentials), res, resources.verifier)


def authenticate_reader(
    operator: ViewerIfApiToken, credentials: Bearer, conn: Conn, resources: Intake
) -> Collector | Principal:
    """A receipt reader: an API token with the viewer role (looked up by hash first)
    or a collector."""
    if operator is not None:
        return operator
    client_id, claims = resources.verifier.client_id(_token(credentials))
    return collectors.resolve(conn, client_id, claims)


CollectorCaller = Annotated[Collector, Depends(authenticate_collector)]
ReceiptReader = Annotated[Collector | Principal, Depends(authenticate_reader)]
IdempotencyKey = Annotated[
    str,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=200,
        pattern=r"^[\x21-\x7e]+$",
        description="Chosen by the collector, unique per capture it posts; a retry sends"
        " the same key. Printable ASCII, no spaces.",
    ),
]


def _submission(body: CaptureRequest, key: str, resources: IntakeResources) -> CaptureSubmission:
    media = MediaType.parse(body.content_type)
    if media.essence not in resources.content_types:
        accepted = ", ".join(sorted(resources.content_types))
        raise UnsupportedMediaType(
            f"content_type {media.essence!r} is not accepted; accepted: {accepted}"
        )
    if len(body.artifact) > resources.max_artifact_bytes:
        raise PayloadTooLarge(f"the artifact may be at most {resources.max_artifact_bytes} bytes")
    if media.essence == RAW_ENVELOPE_CONTENT_TYPE:
        try:
            decode_raw_envelope(body.artifact)
        except MalformedEnvelope as exc:
            raise MalformedRawEnvelope(
                f"the artifact is not a raw envelope: {exc.message}"
            ) from exc
    return CaptureSubmission(
        idempotency_key=key,
        schema_version=body.schema_version,
        source_url=str(body.source_url),
        captured_at=body.captured_at,
        content_type=media.value,
        artifact=body.artifact,
    )


@router.post(
    "/captures",
    summary="Post a capture; answers its receipt (idempotent per Idempotency-Key)",
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {"model": Receipt, "description": "A replay: the receipt of the earlier post"},
        **error_responses(400, 409, 413, 415, 422, 502),
    },
)
def post_capture(
    collector: CollectorCaller,
    resources: Intake,
    body: CaptureRequest,
    idempotency_key: IdempotencyKey,
    response: Response,
) -> Receipt:
    """Stores the artifact in the evidence bucket, records the capture, its receipt
    and its processing job in one transaction, then enqueues the job. 201 with the
    receipt; 200 with the same receipt when the key was used before for the same
    request; 409 ``IDEMPOTENCY_KEY_REUSED`` when it was used for another one."""
    accepted = resources.service.accept(collector, _submission(body, idempotency_key, resources))
    if accepted.replayed:
        response.status_code = status.HTTP_200_OK
    return Receipt.of(accepted.receipt)


@router.get(
    "/receipts/{receipt_id}",
    summary="Read a receipt (its collector instance, or an operator of its tenant)",
    responses=error_responses(404),
)
def get_receipt(reader: ReceiptReader, conn: Conn, receipt_id: ReceiptId) -> Receipt:
    """404 ``NOT_FOUND`` for an unknown receipt; 403 ``TENANT_SCOPE_DENIED`` for
    another tenant's; 403 ``INSTANCE_SCOPE_DENIED`` for another instance's. Collectors
    are matched by instance, so a rotated credential keeps its receipts."""
    row = sql.find_receipt(conn, CAPTURE_JOB, receipt_id)
    if row is None:
        raise ReceiptNotFound(f"no receipt {receipt_id}")
    if isinstance(reader, Principal):
        reader.require_tenant(row.tenant_id)
        return Receipt.of(row)
    if reader.tenant_id != row.tenant_id:
        raise TenantScopeDenied("the receipt belongs to another tenant")
    if (reader.source, reader.instance_id) != (row.source, row.instance_id):
        raise InstanceScopeDenied("the receipt belongs to another collector instance")
    return Receipt.of(row)
