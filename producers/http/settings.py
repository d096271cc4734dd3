"""Resolver API settings from ``GAPLESS_*`` environment variables."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from db.settings import DatabaseSettings
from producers.capture.settings import IntakeSettings
from schemas.http.auth import Grant, parse_grants


class ApiSettings(DatabaseSettings, IntakeSettings):
    # A token pasted where its hash belongs must not end up in an error message.
    model_config = SettingsConfigDict(hide_input_in_errors=True)

    api_tokens: SecretStr = Field(
        description="GAPLESS_API_TOKENS: accepted bearer tokens by SHA-256 hash, each with"
        " its role per tenant: '<sha256hex>:tenant1=operator|tenant2=viewer' or"
        " '<sha256hex>:*=admin', comma-separated; roles viewer < operator < admin, and an"
        " entry without one ('<sha256hex>:tenant1|tenant2', ':*') is admin.",
    )
    resolver_api_port: int = Field(
        default=58080, ge=1, le=65535, description="GAPLESS_RESOLVER_API_PORT (on 127.0.0.1)."
    )
    api_pool_size: int = Field(
        default=8, ge=1, le=200, description="GAPLESS_API_POOL_SIZE: resolver DB connections."
    )
    lease_max_ttl_seconds: int = Field(
        default=3600,
        ge=1,
        description="GAPLESS_LEASE_MAX_TTL_SECONDS: the longest TTL a lease may ask for.",
    )

    @field_validator("api_tokens")
    @classmethod
    def _tokens_parse(cls, value: SecretStr) -> SecretStr:
        parse_grants(value.get_secret_value())
        return value

    def grants(self) -> dict[str, Grant]:
        return parse_grants(self.api_tokens.get_secret_value())
