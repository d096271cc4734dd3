"""Loading settings at start-up, failing with the name of the bad variable."""

from __future__ import annotations

import logging
import os
from typing import TypeVar

from pydantic import ValidationError

from schemas.errors import GaplessError
from schemas.settings import ENV_PREFIX, GaplessSettings

S = TypeVar("S", bound=GaplessSettings)

log = logging.getLogger(__name__)


class ConfigurationError(GaplessError):
    """A ``GAPLESS_*`` variable is missing or invalid; the message names it."""

    code = "CONFIGURATION_INVALID"


def load(settings_class: type[S]) -> S:
    """The settings, or ``ConfigurationError`` naming every bad variable; a deprecated
    variable that was used is named in a warning."""
    try:
        settings = settings_class()
    except ValidationError as exc:
        # Settings holding secrets hide what was given: a token pasted into the
        # wrong variable must not end up in a log.
        hide = bool(settings_class.model_config.get("hide_input_in_errors"))
        problems = []
        for error in exc.errors():
            field = ".".join(str(part) for part in error["loc"])
            given = "" if hide else f" (got {error.get('input')!r})"
            # A check across fields has no location: its message names the variables.
            named = f"{_variable(settings_class, field)}: " if field else ""
            problems.append(f"{named}{error['msg']}{given}")
        raise ConfigurationError("invalid configuration:\n  " + "\n  ".join(problems)) from exc
    present = {name.upper() for name in os.environ}
    for current, *deprecated in settings_class.variables().values():
        for old in deprecated:
            if old in present:
                log.warning("%s is deprecated and will go away: set %s instead", old, current)
    return settings


def _variable(settings_class: type[GaplessSettings], field: str) -> str:
    """The variable an error's location stands for: the field's (a field read under
    aliases is located by its first, and named with every one)."""
    for name, variables in settings_class.variables().items():
        if field == name or field.upper() == variables[0]:
            return " or ".join(variables)
    return f"{ENV_PREFIX}{field}".upper()


def use_local_services() -> dict[str, str]:
    """Point this process (and its children) at the services ``gapless up`` runs.

    Variables already set win, so the same commands run against external services.
    A ``GAPLESS_RESOLVER_DSN`` set without ``GAPLESS_RESOLVER_MIGRATION_DSN`` is left
    to serve as both (the local owner login would point at another database).
    """
    from infra.local.services import local_environment  # the launchers: only here

    env = local_environment()
    if "GAPLESS_RESOLVER_DSN" in os.environ:
        env.pop("GAPLESS_RESOLVER_MIGRATION_DSN")
    for name, value in env.items():
        os.environ.setdefault(name, value)
    return {name: os.environ[name] for name in env if name in os.environ}
