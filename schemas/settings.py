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

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
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


SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

# Each security field and the librdkafka property it passes through, unchanged.
KAFKA_SECURITY_PROPERTIES = {
    "kafka_security_protocol": "security.protocol",
    "kafka_sasl_mechanism": "sasl.mechanism",
    "kafka_sasl_username": "sasl.username",
    "kafka_sasl_password": "sasl.password",
    "kafka_ssl_ca_location": "ssl.ca.location",
    "kafka_ssl_certificate_location": "ssl.certificate.location",
    "kafka_ssl_key_location": "ssl.key.location",
    "kafka_ssl_key_password": "ssl.key.password",
    "kafka_ssl_endpoint_identification_algorithm": "ssl.endpoint.identification.algorithm",
}


KafkaConnection = str | Mapping[str, Any]
"""A bootstrap list (a broker without security, e.g. the local one), or
``KafkaSettings.client_config()``, which carries the security settings."""


def client_config(
    connection: KafkaConnection, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A Kafka client's configuration: the connection's, plus the client's own
    ``extra`` properties."""
    base = {"bootstrap.servers": connection} if isinstance(connection, str) else dict(connection)
    return {**base, **(extra or {})}


class KafkaSettings(GaplessSettings):
    """The broker, its security settings (passed through to every Kafka client the
    project builds), the events topic's name and layout, and the control and rebuild
    status topics' names."""

    # The SASL and key passwords must not end up in an error message.
    model_config = SettingsConfigDict(hide_input_in_errors=True)

    kafka_bootstrap: str = Field(
        default="127.0.0.1:19092",
        description="GAPLESS_KAFKA_BOOTSTRAP: comma-separated host:port list.",
    )
    events_topic: str = Field(default=EVENTS_TOPIC, description="GAPLESS_EVENTS_TOPIC")
    events_partitions: int = Field(
        default=6, ge=1, description="GAPLESS_EVENTS_PARTITIONS: used when creating the topic."
    )
    kafka_replication_factor: int = Field(
        default=1,
        ge=1,
        description="GAPLESS_KAFKA_REPLICATION_FACTOR: replicas of every topic gapless"
        " creates (3 on a cluster); a topic that exists is left as it is.",
    )
    kafka_min_insync_replicas: int | None = Field(
        default=None,
        ge=1,
        description="GAPLESS_KAFKA_MIN_INSYNC_REPLICAS: replicas that must hold an acks=all"
        " write before it counts (min.insync.replicas, set on every topic gapless creates);"
        " unset: 2 when the replication factor is 3 or more, else 1.",
    )
    control_topic: str = Field(
        default=CONTROL_TOPIC,
        description="GAPLESS_CONTROL_TOPIC: operators' commands to the agents (rebuilds).",
    )
    rebuild_status_topic: str = Field(
        default=REBUILD_STATUS_TOPIC,
        description="GAPLESS_REBUILD_STATUS_TOPIC: the agents' rebuild status events.",
    )
    kafka_security_protocol: SecurityProtocol | None = Field(
        default=None, description="GAPLESS_KAFKA_SECURITY_PROTOCOL: security.protocol."
    )
    kafka_sasl_mechanism: SaslMechanism | None = Field(
        default=None, description="GAPLESS_KAFKA_SASL_MECHANISM: sasl.mechanism."
    )
    kafka_sasl_username: str | None = Field(
        default=None, description="GAPLESS_KAFKA_SASL_USERNAME: sasl.username."
    )
    kafka_sasl_password: SecretStr | None = Field(
        default=None, description="GAPLESS_KAFKA_SASL_PASSWORD: sasl.password."
    )
    kafka_ssl_ca_location: str | None = Field(
        default=None, description="GAPLESS_KAFKA_SSL_CA_LOCATION: ssl.ca.location."
    )
    kafka_ssl_certificate_location: str | None = Field(
        default=None,
        description="GAPLESS_KAFKA_SSL_CERTIFICATE_LOCATION: ssl.certificate.location.",
    )
    kafka_ssl_key_location: str | None = Field(
        default=None, description="GAPLESS_KAFKA_SSL_KEY_LOCATION: ssl.key.location."
    )
    kafka_ssl_key_password: SecretStr | None = Field(
        default=None, description="GAPLESS_KAFKA_SSL_KEY_PASSWORD: ssl.key.password."
    )
    kafka_ssl_endpoint_identification_algorithm: Literal["https", "none"] | None = Field(
        default=None,
        description="GAPLESS_KAFKA_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM:"
        " ssl.endpoint.identification.algorithm.",
    )

    @model_validator(mode="after")
    def _security_consistent(self) -> KafkaSettings:
        """Refuse at start-up what librdkafka would refuse (or ignore) at the first
        connection, naming the variables."""
        protocol = self.kafka_security_protocol or "PLAINTEXT"
        sasl = protocol.startswith("SASL_")
        if self.kafka_sasl_mechanism is not None and not sasl:
            raise ValueError(
                "GAPLESS_KAFKA_SASL_MECHANISM needs GAPLESS_KAFKA_SECURITY_PROTOCOL"
                f" SASL_PLAINTEXT or SASL_SSL (it is {protocol})"
            )
        if sasl and (self.kafka_sasl_username is None or self.kafka_sasl_password is None):
            raise ValueError(
                f"GAPLESS_KAFKA_SECURITY_PROTOCOL={protocol} needs GAPLESS_KAFKA_SASL_USERNAME"
                " and GAPLESS_KAFKA_SASL_PASSWORD"
            )
        if not sasl and (self.kafka_sasl_username or self.kafka_sasl_password):
            raise ValueError(
                "GAPLESS_KAFKA_SASL_USERNAME and GAPLESS_KAFKA_SASL_PASSWORD need"
                f" GAPLESS_KAFKA_SECURITY_PROTOCOL SASL_PLAINTEXT or SASL_SSL (it is {protocol})"
            )
        ssl_set = [
            name
            for name in KAFKA_SECURITY_PROPERTIES
            if name.startswith("kafka_ssl_") and getattr(self, name) is not None
        ]
        if ssl_set and not protocol.endswith("SSL"):
            named = ", ".join(f"GAPLESS_{n.upper()}" for n in ssl_set)
            raise ValueError(
                f"{named} need GAPLESS_KAFKA_SECURITY_PROTOCOL SSL or SASL_SSL (it is {protocol})"
            )
        return self

    @model_validator(mode="after")
    def _replication_consistent(self) -> KafkaSettings:
        if self.kafka_min_insync_replicas is not None and (
            self.kafka_min_insync_replicas > self.kafka_replication_factor
        ):
            raise ValueError(
                f"GAPLESS_KAFKA_MIN_INSYNC_REPLICAS={self.kafka_min_insync_replicas} is more"
                f" than GAPLESS_KAFKA_REPLICATION_FACTOR={self.kafka_replication_factor}:"
                " no write could ever be acknowledged"
            )
        return self

    @property
    def min_insync_replicas(self) -> int:
        """``kafka_min_insync_replicas``, or what it defaults to: one replica may be lost
        without losing an acknowledged write once there are three."""
        if self.kafka_min_insync_replicas is not None:
            return self.kafka_min_insync_replicas
        return 2 if self.kafka_replication_factor >= 3 else 1

    def kafka_security(self) -> dict[str, str]:
        """The security properties that are set, under librdkafka's names."""
        found: dict[str, str] = {}
        for name, prop in KAFKA_SECURITY_PROPERTIES.items():
            value = getattr(self, name)
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            if value is not None:
                found[prop] = value
        return found

    def client_config(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Every Kafka client's base configuration: the bootstrap list and the security
        settings, plus the client's own ``extra`` properties."""
        return client_config(
            {"bootstrap.servers": self.kafka_bootstrap, **self.kafka_security()}, extra
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


class LogSettings(GaplessSettings):
    """How the long-running processes log (see ``schemas.logs``)."""

    log_format: Literal["json", "text"] | None = Field(
        default=None,
        description="GAPLESS_LOG_FORMAT: json (one object per line) or text; unset: json"
        " when stderr is not a terminal, text when it is.",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = Field(
        default="INFO", description="GAPLESS_LOG_LEVEL"
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value
