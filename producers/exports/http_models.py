"""Request and response bodies of the export endpoints."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class ExportRequest(BaseModel):
    lease_id: uuid.UUID = Field(description="The rebuild's live lease on the stream.")


class Export(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    export_id: uuid.UUID
    tenant_id: str
    catalog_id: str
    history_epoch: int
    lease_id: uuid.UUID
    status: str = Field(description="writing, ready, failed or deleted")
    position: int | None = Field(description="W, the committed cursor the snapshot read (ready).")
    chunks: int
    records: int
    manifest_key: str | None = Field(description="In the exports bucket (ready).")
    manifest_sha256: str | None
    error_code: str | None
    error_message: str | None
    created_at: datetime
    heartbeat_at: datetime
    idle_seconds: float = Field(description="Seconds since the last heartbeat.")
    ready_at: datetime | None
