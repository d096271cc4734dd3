"""Snapshot export settings from ``GAPLESS_*`` environment variables."""

from __future__ import annotations

import os
import tempfile

from pydantic import Field, field_validator

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
    export_rows_retention_seconds: float = Field(
        default=30 * 86_400.0,
        ge=0,
        description="GAPLESS_EXPORT_ROWS_RETENTION_SECONDS: an export's row is kept this long"
        " after retention deleted its objects (as history), then deleted too.",
    )
    export_spool_dir: str = Field(
        default_factory=tempfile.gettempdir,
        min_length=1,
        description="GAPLESS_EXPORT_SPOOL_DIR: where an export spools its records while its"
        " snapshot is open, before they go to the bucket (room for the largest export);"
        " default: the system's temporary directory.",
    )

    @field_validator("export_spool_dir")
    @classmethod
    def _writable_directory(cls, value: str) -> str:
        if not os.path.isdir(value):
            raise ValueError(f"{value!r} is not a directory")
        if not os.access(value, os.W_OK | os.X_OK):
            raise ValueError(f"{value!r} is not writable")
        return value
