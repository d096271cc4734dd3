"""The accepted API tokens (``GAPLESS_API_TOKENS``), a setting of both APIs."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from schemas.http.auth import Grant, parse_grants
from schemas.settings import GaplessSettings


class ApiTokenSettings(GaplessSettings):
    # A token pasted where its hash belongs must not end up in an error message.
    model_config = SettingsConfigDict(hide_input_in_errors=True)

    api_tokens: SecretStr = Field(
        description="GAPLESS_API_TOKENS: accepted bearer tokens by SHA-256 hash, each with"
        " its role per tenant: '<sha256hex>:tenant1=operator|tenant2=viewer' or"
        " '<sha256hex>:*=admin', comma-separated; roles viewer < operator < admin, and an"
        " entry without one ('<sha256hex>:tenant1|tenant2', ':*') is admin.",
    )

    @field_validator("api_tokens")
    @classmethod
    def _tokens_parse(cls, value: SecretStr) -> SecretStr:
        parse_grants(value.get_secret_value())
        return value

    def grants(self) -> dict[str, Grant]:
        return parse_grants(self.api_tokens.get_secret_value())
