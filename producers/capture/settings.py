"""Intake settings from ``GAPLESS_*`` environment variables.

``JobQueueSettings`` is shared by the API (its enqueue after commit) and the pending-job
sweeper; ``IntakeSettings`` (with ``schemas.settings.ObjectStoreSettings``)
adds what only the API needs (collector tokens, limits).
``producers.settings.ApiSettings`` includes ``IntakeSettings``.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from db.settings import DatabaseSettings
from producers.capture.raw import RAW_ENVELOPE_CONTENT_TYPE
from producers.capture.rules import MediaType
from schemas.settings import KafkaSettings, ObjectStoreSettings
from schemas.topics import JOBS_TOPIC

# The raw envelope lets a collector that fetched several responses post them together.
DEFAULT_CONTENT_TYPES = (
    f"text/html,application/json,application/ld+json,text/plain,{RAW_ENVELOPE_CONTENT_TYPE}"
)


class JobQueueSettings(KafkaSettings):
    """The jobs topic, and how an enqueue on it waits and backs off."""

    jobs_topic: str = Field(default=JOBS_TOPIC, description="GAPLESS_JOBS_TOPIC")
    enqueue_timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        le=120,
        description="GAPLESS_ENQUEUE_TIMEOUT_SECONDS: how long an enqueue waits for the"
        " broker's confirmation before the job is left pending for the sweeper.",
    )
    job_sweep_after_seconds: float = Field(
        default=30.0,
        ge=0,
        description="GAPLESS_JOB_SWEEP_AFTER_SECONDS: a new job is left to the API's own"
        " enqueue this long before the sweeper may take it.",
    )
    enqueue_backoff_base_seconds: float = Field(
        default=2.0, gt=0, description="GAPLESS_ENQUEUE_BACKOFF_BASE_SECONDS"
    )
    enqueue_backoff_cap_seconds: float = Field(
        default=600.0, gt=0, description="GAPLESS_ENQUEUE_BACKOFF_CAP_SECONDS"
    )


class IntakeSettings(JobQueueSettings, ObjectStoreSettings):
    """What only the API's intake needs: collector tokens and limits (hides what was
    given in errors, from ``ObjectStoreSettings``)."""

    collector_jwt_public_key: str | None = Field(
        default=None,
        description="GAPLESS_COLLECTOR_JWT_PUBLIC_KEY: PEM public key that signs collector"
        " tokens (or set GAPLESS_COLLECTOR_JWKS_URL instead).",
    )
    collector_jwks_url: str | None = Field(
        default=None, description="GAPLESS_COLLECTOR_JWKS_URL: JWKS of the token issuer."
    )
    collector_jwt_issuer: str | None = Field(
        default=None, description="GAPLESS_COLLECTOR_JWT_ISSUER: required ``iss``."
    )
    collector_jwt_audience: str = Field(
        default="gapless-resolver-api",
        description="GAPLESS_COLLECTOR_JWT_AUDIENCE: required ``aud``.",
    )
    collector_jwt_algorithms: str = Field(
        default="ES256,RS256,EdDSA",
        description="GAPLESS_COLLECTOR_JWT_ALGORITHMS: accepted signature algorithms.",
    )
    intake_max_artifact_bytes: int = Field(
        default=10 * 1024 * 1024,
        ge=1,
        description="GAPLESS_INTAKE_MAX_ARTIFACT_BYTES: larger artifacts are refused (413).",
    )
    intake_content_types: str = Field(
        default=DEFAULT_CONTENT_TYPES,
        description="GAPLESS_INTAKE_CONTENT_TYPES: accepted artifact media types"
        " (comma-separated); others are refused (415).",
    )

    @model_validator(mode="after")
    def _one_key_source(self) -> IntakeSettings:
        if self.collector_jwt_public_key and self.collector_jwks_url:
            raise ValueError(
                "set GAPLESS_COLLECTOR_JWT_PUBLIC_KEY or GAPLESS_COLLECTOR_JWKS_URL, not both"
            )
        if (self.collector_jwt_public_key or self.collector_jwks_url) and not (
            self.collector_jwt_issuer
        ):
            raise ValueError("GAPLESS_COLLECTOR_JWT_ISSUER is required with a collector key")
        return self

    def content_types(self) -> frozenset[str]:
        return frozenset(
            MediaType.parse(t).essence for t in self.intake_content_types.split(",") if t.strip()
        )

    def algorithms(self) -> list[str]:
        return [a.strip() for a in self.collector_jwt_algorithms.split(",") if a.strip()]


class SweeperSettings(DatabaseSettings, JobQueueSettings):
    """``gapless sweep-jobs``: re-enqueues intake jobs left pending."""

    sweep_interval_seconds: float = Field(
        default=10.0, gt=0, description="GAPLESS_SWEEP_INTERVAL_SECONDS: pause between passes."
    )
    sweep_http_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="GAPLESS_SWEEP_HTTP_PORT: /healthz, /readyz and /metrics of the looping"
        " sweeper; 0 disables.",
    )
    sweep_http_host: str = Field(
        default="127.0.0.1",
        min_length=1,
        description="GAPLESS_SWEEP_HTTP_HOST: the address the probes listen on (the image:"
        " 0.0.0.0).",
    )
    sweep_page_size: int = Field(
        default=200, ge=1, le=10_000, description="GAPLESS_SWEEP_PAGE_SIZE: jobs per page."
    )
    sweep_max_pages: int = Field(
        default=50, ge=1, description="GAPLESS_SWEEP_MAX_PAGES: pages per pass at most."
    )
