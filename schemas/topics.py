"""Kafka topics and connection settings: the contract producers and processors share."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

EVENTS_TOPIC = "catalog.events.v1"
CONTROL_TOPIC = "catalog.control.v1"
JOBS_TOPIC = "intake.jobs.v1"


class KafkaSettings(BaseSettings):
    """Broker address and topic layout, from ``GAPLESS_*`` environment variables."""

    model_config = SettingsConfigDict(env_prefix="GAPLESS_", extra="ignore")

    kafka_bootstrap: str = Field(
        default="127.0.0.1:59092",
        description="GAPLESS_KAFKA_BOOTSTRAP: comma-separated host:port list.",
    )
    events_topic: str = Field(default=EVENTS_TOPIC, description="GAPLESS_EVENTS_TOPIC")
    events_partitions: int = Field(
        default=6, ge=1, description="GAPLESS_EVENTS_PARTITIONS: used when creating the topic."
    )
