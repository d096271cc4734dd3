"""The base of every process's settings, and the Kafka connection settings.

A setting is the environment variable ``GAPLESS_`` + its field's name (matched
without regard to case); a field that was renamed lists its variables instead,
``validation_alias=AliasChoices(current, *deprecated)``, so an old name keeps
working. Variables no class declares are ignored: one environment serves every
process. Secrets are ``SecretStr``, and a class holding one hides what was given in
its validation errors (``hide_input_in_errors``; subclasses inherit it).
``infra.config.load`` reads a class at start-up and names the bad variable.

This module sits in ``schemas``, the lowest layer, so ``db``, ``producers``,
``processors`` and ``infra`` can all derive from it.
"""

from __future__ import annotations

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from schemas.topics import CONTROL_TOPIC, EVENTS_TOPIC, REBUILD_STATUS_TOPIC

ENV_PREFIX = "GAPLESS_"


class GaplessSettings(BaseSettings):
    # validate_by_name: a field read under aliases can still be set by its name in code.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", validate_by_name=True)

    @classmethod
    def variables(cls) -> dict[str, tuple[str, ...]]:
        """Each field's environment variables: the current name first, then any
        deprecated aliases."""
        found: dict[str, tuple[str, ...]] = {}
        for name, info in cls.model_fields.items():
            alias = info.validation_alias
            if isinstance(alias, AliasChoices):
                found[name] = tuple(c.upper() for c in alias.choices if isinstance(c, str))
            elif isinstance(alias, str):
                found[name] = (alias.upper(),)
            else:
                found[name] = (f"{ENV_PREFIX}{name}".upper(),)
        return found


class KafkaSettings(GaplessSettings):
    """The broker, the events topic's name and layout, and the control and rebuild
    status topics' names."""

    kafka_bootstrap: str = Field(
        default="127.0.0.1:19092",
        description="GAPLESS_KAFKA_BOOTSTRAP: comma-separated host:port list.",
    )
    events_topic: str = Field(default=EVENTS_TOPIC, description="GAPLESS_EVENTS_TOPIC")
    events_partitions: int = Field(
        default=6, ge=1, description="GAPLESS_EVENTS_PARTITIONS: used when creating the topic."
    )
    control_topic: str = Field(
        default=CONTROL_TOPIC,
        description="GAPLESS_CONTROL_TOPIC: operators' commands to the agents (rebuilds).",
    )
    rebuild_status_topic: str = Field(
        default=REBUILD_STATUS_TOPIC,
        description="GAPLESS_REBUILD_STATUS_TOPIC: the agents' rebuild status events.",
    )


class SchemaRegistrySettings(GaplessSettings):
    """Where the Confluent-compatible schema registry is, for the processes that encode
    or decode events (``schemas.registry_codec``)."""

    schema_registry_url: str | None = Field(
        default=None,
        description=(
            "GAPLESS_SCHEMA_REGISTRY_URL: the registry's Confluent-compatible API"
            " (Apicurio: <address>/apis/ccompat/v7). Set: writers encode in the Confluent"
            " framing and readers read it; unset: the single-object framing only."
        ),
    )


class ObjectStoreSettings(GaplessSettings):
    """The S3-compatible object store and the bounds of every call to it; shared by
    the API (evidence puts, export writes), the capture worker (evidence reads), the
    evidence sweeper and the agents (export reads during a rebuild)."""

    # The keys must not end up in an error message (every class including this one
    # inherits it).
    model_config = SettingsConfigDict(hide_input_in_errors=True)

    s3_endpoint: str | None = Field(
        default=None, description="GAPLESS_S3_ENDPOINT: S3 endpoint URL (unset: AWS)."
    )
    s3_access_key: SecretStr | None = Field(default=None, description="GAPLESS_S3_ACCESS_KEY")
    s3_secret_key: SecretStr | None = Field(default=None, description="GAPLESS_S3_SECRET_KEY")
    s3_region: str = Field(default="us-east-1", description="GAPLESS_S3_REGION")
    evidence_bucket: str = Field(default="gapless-evidence", description="GAPLESS_EVIDENCE_BUCKET")
    s3_connect_timeout_seconds: float = Field(
        default=3.0, gt=0, description="GAPLESS_S3_CONNECT_TIMEOUT_SECONDS"
    )
    s3_read_timeout_seconds: float = Field(
        default=20.0, gt=0, description="GAPLESS_S3_READ_TIMEOUT_SECONDS"
    )
    s3_max_attempts: int = Field(
        default=4, ge=1, le=10, description="GAPLESS_S3_MAX_ATTEMPTS: per object call."
    )
    s3_max_concurrency: int = Field(
        default=8,
        ge=1,
        le=256,
        description="GAPLESS_S3_MAX_CONCURRENCY: object calls in flight per process.",
    )
