"""Loading settings at start-up, failing with the name of the bad variable."""

from __future__ import annotations

import os
from typing import TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings

from db.settings import ENV_PREFIX
from infra.local import local_environment
from schemas.errors import GaplessError

S = TypeVar("S", bound=BaseSettings)


class ConfigurationError(GaplessError):
    """A ``GAPLESS_*`` variable is missing or invalid; the message names it."""

    code = "CONFIGURATION_INVALID"


def load(settings_class: type[S]) -> S:
    try:
        return settings_class()
    except ValidationError as exc:
        # Settings holding secrets hide what was given: a token pasted into the
        # wrong variable must not end up in a log.
        hide = bool(settings_class.model_config.get("hide_input_in_errors"))
        problems = []
        for error in exc.errors():
            field = ".".join(str(part) for part in error["loc"])
            variable = f"{ENV_PREFIX}{field}".upper()
            given = "" if hide else f" (got {error.get('input')!r})"
            problems.append(f"{variable}: {error['msg']}{given}")
        raise ConfigurationError("invalid configuration:\n  " + "\n  ".join(problems)) from exc


def use_local_services() -> dict[str, str]:
    """Point this process (and its children) at the services ``gapless up`` runs.

    Variables already set win, so the same commands run against external services.
    A ``GAPLESS_RESOLVER_DSN`` set without ``GAPLESS_RESOLVER_MIGRATION_DSN`` is left
    to serve as both (the local owner login would point at another database).
    """
    env = local_environment()
    if "GAPLESS_RESOLVER_DSN" in os.environ:
        env.pop("GAPLESS_RESOLVER_MIGRATION_DSN")
    for name, value in env.items():
        os.environ.setdefault(name, value)
    return {name: os.environ[name] for name in env if name in os.environ}
