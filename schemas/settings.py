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

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from schemas.topics import EVENTS_TOPIC

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
    """The broker, and the events topic's name and layout."""

    kafka_bootstrap: str = Field(
        default="127.0.0.1:59092",
        description="GAPLESS_KAFKA_BOOTSTRAP: comma-separated host:port list.",
    )
    events_topic: str = Field(default=EVENTS_TOPIC, description="GAPLESS_EVENTS_TOPIC")
    events_partitions: int = Field(
        default=6, ge=1, description="GAPLESS_EVENTS_PARTITIONS: used when creating the topic."
    )
