"""The console process's settings (``gapless console``), from ``GAPLESS_*`` variables.

It reads the three databases (``GAPLESS_*_DSN``), publishes operators' commands on
the control topic (the ``GAPLESS_KAFKA_*`` settings), decodes events with the
configured framing (``GAPLESS_SCHEMA_REGISTRY_URL``), names the live consumer as the
agents do (``GAPLESS_AGENTS_CONSUMER``) and lets in the tokens the APIs accept
(``GAPLESS_API_TOKENS``, with the same roles).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from db.settings import DatabaseSettings
from processors.settings import LiveConsumerSettings
from schemas.http.settings import ApiTokenSettings
from schemas.settings import KafkaSettings, SchemaRegistrySettings


class ConsoleSettings(
    DatabaseSettings,
    KafkaSettings,
    SchemaRegistrySettings,
    LiveConsumerSettings,
    ApiTokenSettings,
):
    # A token pasted where its hash belongs must not end up in an error message.
    model_config = SettingsConfigDict(hide_input_in_errors=True)

    console_host: str = Field(
        default="127.0.0.1",
        min_length=1,
        description="GAPLESS_CONSOLE_HOST: the address the console listens on (the image:"
        " 0.0.0.0).",
    )
    console_port: int = Field(default=28088, ge=1, le=65535, description="GAPLESS_CONSOLE_PORT")
    console_session_seconds: int = Field(
        default=8 * 3600,
        ge=60,
        le=7 * 86_400,
        description="GAPLESS_CONSOLE_SESSION_SECONDS: how long a login lasts (then the"
        " person logs in again with the token).",
    )
    console_secure_cookie: bool = Field(
        default=False,
        description="GAPLESS_CONSOLE_SECURE_COOKIE: mark the session cookie Secure (sent over"
        " HTTPS only); set it wherever the console is reached through TLS.",
    )
    console_page_size: int = Field(
        default=50,
        ge=10,
        le=500,
        description="GAPLESS_CONSOLE_PAGE_SIZE: streams (and audit records) per page.",
    )
    console_pool_size: int = Field(
        default=4,
        ge=1,
        le=50,
        description="GAPLESS_CONSOLE_POOL_SIZE: connections to each database (one per page"
        " being read).",
    )
    console_assets_dir: Path | None = Field(
        default=None,
        description="GAPLESS_CONSOLE_ASSETS_DIR: the directory holding htmx.min.js (the"
        " pinned htmx that refreshes the tables in place); default: .local/console-assets"
        " of a checkout (make console-assets); the image sets it. Without the file the"
        " pages work, reloaded by hand.",
    )
    console_resume_wait_seconds: float = Field(
        default=10.0,
        ge=0.0,
        le=120.0,
        description="GAPLESS_CONSOLE_RESUME_WAIT_SECONDS: how long a resume waits for every"
        " live process to let the pause go before the page answers (the resume stands"
        " either way; the pauses page shows who has not acknowledged).",
    )
