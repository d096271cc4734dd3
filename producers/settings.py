"""The resolver API process's settings, from ``GAPLESS_*`` environment variables: its
listener and pool, and the settings of the features it serves (pauses, intake, tokens)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from db.settings import PauseSettings
from producers.capture.settings import IntakeSettings
from schemas.http.settings import ApiTokenSettings


class ApiSettings(PauseSettings, IntakeSettings, ApiTokenSettings):
    # A token pasted where its hash belongs must not end up in an error message.
    model_config = SettingsConfigDict(hide_input_in_errors=True)

    resolver_api_port: int = Field(
        default=18080, ge=1, le=65535, description="GAPLESS_RESOLVER_API_PORT"
    )
    resolver_api_host: str = Field(
        default="127.0.0.1",
        min_length=1,
        description="GAPLESS_RESOLVER_API_HOST: the address it listens on (the image: 0.0.0.0).",
    )
    api_pool_size: int = Field(
        default=8, ge=1, le=200, description="GAPLESS_API_POOL_SIZE: resolver DB connections."
    )
    lease_max_ttl_seconds: int = Field(
        default=3600,
        ge=1,
        description="GAPLESS_LEASE_MAX_TTL_SECONDS: the longest TTL a lease may ask for.",
    )
