"""Snapshot export settings from ``GAPLESS_*`` environment variables."""

from __future__ import annotations

from pydantic import Field

from schemas.settings import ObjectStoreSettings


class ExportSettings(ObjectStoreSettings):
    exports_bucket: str = Field(
        default="gapless-exports",
        description="GAPLESS_EXPORTS_BUCKET: where snapshot exports (chunks, manifests) go.",
    )
    export_chunk_records: int = Field(
        default=20_000,
        ge=1,
        le=1_000_000,
        description="GAPLESS_EXPORT_CHUNK_RECORDS: records (lines) per chunk object"
        " (bounds memory).",
    )
    exports_keep: int = Field(
        default=3,
        ge=1,
        le=100,
        description="GAPLESS_EXPORTS_KEEP: ready exports kept per stream; older ones go.",
    )
    export_stale_seconds: float = Field(
        default=300.0,
        gt=0,
        description="GAPLESS_EXPORT_STALE_SECONDS: a writing export without a heartbeat"
        " this long is abandoned (its writer died); its objects go.",
    )
