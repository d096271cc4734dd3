"""Database connection settings, read from ``GAPLESS_*`` environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "GAPLESS_"


class DatabaseSettings(BaseSettings):
    """Where the three PostgreSQL databases live.

    The defaults point at the cluster that ``gapless up`` starts on loopback, so the
    same code runs unchanged against an external PostgreSQL when the variables are set.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    resolver_dsn: str = Field(
        default="postgresql://postgres@127.0.0.1:55432/resolver",
        description="GAPLESS_RESOLVER_DSN: the resolver's accepted state and outbox.",
    )
    product_dsn: str = Field(
        default="postgresql://postgres@127.0.0.1:55432/product",
        description="GAPLESS_PRODUCT_DSN: projections, inbox, parking, progress.",
    )
    control_dsn: str = Field(
        default="postgresql://postgres@127.0.0.1:55432/control",
        description="GAPLESS_CONTROL_DSN: the trusted history-epoch authority.",
    )
