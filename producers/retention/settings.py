"""Pruner settings from ``GAPLESS_*`` environment variables."""

from __future__ import annotations

from pydantic import Field, field_validator

from db.settings import DatabaseSettings, FencedRetentionSettings
from schemas.ids import CONSUMER_ID


class RetentionSettings(DatabaseSettings, FencedRetentionSettings):
    retention_age_seconds: float = Field(
        default=86_400.0,
        ge=0,
        description="GAPLESS_RETENTION_AGE_SECONDS: published events younger than this"
        " are never pruned, whatever the consumers have reported.",
    )
    prune_interval_seconds: float = Field(
        default=60.0, gt=0, description="GAPLESS_PRUNE_INTERVAL_SECONDS: pause between passes."
    )
    prune_http_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="GAPLESS_PRUNE_HTTP_PORT: /healthz, /readyz and /metrics of the looping"
        " pruner; 0 disables.",
    )
    prune_http_host: str = Field(
        default="127.0.0.1",
        min_length=1,
        description="GAPLESS_PRUNE_HTTP_HOST: the address the probes listen on (the image:"
        " 0.0.0.0).",
    )
    prune_batch_size: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="GAPLESS_PRUNE_BATCH_SIZE: rows deleted per transaction (the"
        " retention lock is held that long).",
    )
    lease_retention_seconds: float = Field(
        default=7 * 86_400.0,
        ge=0,
        description="GAPLESS_LEASE_RETENTION_SECONDS: a released or expired rebuild lease"
        " is kept this long (as history), then deleted once no export row names it.",
    )
    retention_consumers: str = Field(
        default="product-applier",
        description="GAPLESS_RETENTION_CONSUMERS: standing consumers, comma-separated, that"
        " hold every stream from its first event (declared at start-up; retire one with"
        " `gapless consumers retire`). Empty: none declared.",
    )

    @field_validator("retention_consumers")
    @classmethod
    def _consumer_names(cls, value: str) -> str:
        for name in (n.strip() for n in value.split(",")):
            if name and not CONSUMER_ID.fullmatch(name):
                raise ValueError(f"{name!r} is not a consumer id ({CONSUMER_ID.pattern})")
        return value

    def standing_consumers(self) -> list[str]:
        return [n.strip() for n in self.retention_consumers.split(",") if n.strip()]
