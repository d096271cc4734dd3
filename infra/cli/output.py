"""What every command shares: messages to stderr, failing with exit code 2, the logs,
one record printed as a JSON object or as a table line, and the operator's name."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import click

from infra.config import ConfigurationError, load
from infra.local import ServiceError


def echo(message: str) -> None:
    """A message for the person at the terminal (stderr, so stdout stays data)."""
    click.echo(message, err=True)


def fail(exc: Exception) -> NoReturn:
    click.secho(f"error: {exc}", fg="red", err=True)
    sys.exit(2)


def guarded(fn: Callable[[], Any]) -> Any:
    """Run ``fn``; a service that is down or a bad setting ends the command with its
    message instead of a traceback."""
    try:
        return fn()
    except (ServiceError, ConfigurationError) as exc:
        fail(exc)


def emit(as_json: bool, record: Mapping[str, Any], line: str) -> None:
    """One result on stdout: ``record`` as one JSON object (``--json``), else ``line``."""
    click.echo(json.dumps(record) if as_json else line)


def process_logging(service: str) -> None:
    """Logs of a long-running process on stderr: JSON lines, or text on a terminal
    (GAPLESS_LOG_FORMAT, GAPLESS_LOG_LEVEL); and its traces under the ``service``
    name when OTEL_EXPORTER_OTLP_ENDPOINT is set (``schemas.tracing``)."""
    from schemas.logs import configure_logging
    from schemas.settings import LogSettings
    from schemas.tracing import configure

    configure_logging(guarded(lambda: load(LogSettings)))
    configure(service)


def actor() -> str:
    """Who an operator command acts as, for the audit trail."""
    import getpass

    return os.environ.get("GAPLESS_OPERATOR") or getpass.getuser()


def resolver_conn() -> Any:
    """An autocommit connection to the resolver database as the services' login."""
    import psycopg

    from db.settings import DatabaseSettings

    settings = guarded(lambda: load(DatabaseSettings))
    return psycopg.connect(settings.resolver_dsn, autocommit=True)
