"""Request and response bodies of the intake endpoints (the OpenAPI contract)."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    HttpUrl,
    JsonValue,
    field_validator,
)

from db.resolver.intake import ReceiptRow
from producers.capture.rules import SUPPORTED_SCHEMA_VERSIONS
from schemas.http.fields import UtcDatetime

_VERSIONS = ", ".join(str(v) for v in sorted(SUPPORTED_SCHEMA_VERSIONS))


class CaptureRequest(BaseModel):
    """A captured artifact and what the collector knows about it."""

    model_config = ConfigDict(extra="forbid", val_json_bytes="base64")

    schema_version: int = Field(
        description=f"Version of this capture format; supported: {_VERSIONS}.",
        json_schema_extra={"enum": list[JsonValue](sorted(SUPPORTED_SCHEMA_VERSIONS))},
    )
    source_url: HttpUrl = Field(description="Where the artifact was fetched (http or https).")
    captured_at: UtcDatetime = Field(description="When it was fetched, with a UTC offset.")
    content_type: str = Field(
        min_length=1,
        max_length=255,
        description="Media type of the artifact, e.g. text/html or application/json;"
        " an unaccepted type is 415 UNSUPPORTED_MEDIA_TYPE.",
    )
    artifact: bytes = Field(
        description="The artifact's bytes, base64-encoded; larger than the configured"
        " limit is 413 PAYLOAD_TOO_LARGE."
    )

    @field_validator("schema_version")
    @classmethod
    def _supported(cls, value: int) -> int:
        if value not in SUPPORTED_SCHEMA_VERSIONS:
            raise ValueError(f"unsupported schema version {value}; supported: {_VERSIONS}")
        return value


class Receipt(BaseModel):
    """The durable acknowledgement of a capture. Replaying the post with the same
    idempotency key returns the same body."""

    receipt_id: uuid.UUID
    capture_id: uuid.UUID
    job_id: uuid.UUID | None = Field(description="The capture's processing job.")
    tenant_id: str
    source: str
    instance_id: str = Field(description="The collector instance that owns the receipt.")
    idempotency_key: str
    schema_version: int
    source_url: str
    captured_at: datetime
    content_type: str
    content_sha256: str = Field(description="Hex SHA-256 of the artifact.")
    size_bytes: int
    evidence_key: str = Field(description="Key of the artifact in the evidence bucket.")
    received_at: datetime

    @classmethod
    def of(cls, row: ReceiptRow) -> Receipt:
        return cls(
            receipt_id=row.receipt_id,
            capture_id=row.capture_id,
            job_id=row.job_id,
            tenant_id=row.tenant_id,
            source=row.source,
            instance_id=row.instance_id,
            idempotency_key=row.idempotency_key,
            schema_version=row.schema_version,
            source_url=row.source_url,
            captured_at=row.captured_at,
            content_type=row.content_type,
            content_sha256=row.content_sha256,
            size_bytes=row.size_bytes,
            evidence_key=row.evidence_key,
            received_at=row.created_at,
        )
