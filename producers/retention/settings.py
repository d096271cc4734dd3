"""Pruner settings from ``GAPLESS_*`` environment variables."""

from __future__ import annotations

from pydantic import Field

from db.settings import DatabaseSettings


class RetentionSettings(DatabaseSettings):
    retention_age_seconds: float = Field(
        default=86_400.0,
        ge=0,
        description="GAPLESS_RETENTION_AGE_SECONDS: published events younger than this"
        " are never pruned, whatever the consumers have reported.",
    )
    prune_interval_seconds: float = Field(
        default=60.0, gt=0, description="GAPLESS_PRUNE_INTERVAL_SECONDS: pause between passes."
    )
    prune_batch_size: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="GAPLESS_PRUNE_BATCH_SIZE: rows deleted per transaction (the"
        " retention lock is held that long).",
    )
