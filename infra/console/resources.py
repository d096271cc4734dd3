"""What one console process holds for its requests: its settings, the accepted
tokens' grants, a pool of connections to each database, the event codec, the
templates and the metrics (``Console``; ``create_app`` builds it, its lifespan opens
and closes the pools, and every route finds it with ``console(request)``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import jinja2
from fastapi import Request
from fastapi.templating import Jinja2Templates
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from infra.console.assets import SCRIPT_PATH, find_script
from infra.console.metrics import ConsoleMetrics
from infra.console.settings import ConsoleSettings
from infra.status import seconds
from processors.applier.batch import Applier
from schemas.codec import EventCodec
from schemas.http.auth import Grant
from schemas.registry_codec import codec_for

HERE = Path(__file__).parent


def _pool(dsn: str, size: int, name: str) -> ConnectionPool:
    # Autocommit: each read outside an explicit transaction sees the latest commits
    # and holds no snapshot open; the modules that need one open it themselves.
    return ConnectionPool(
        dsn, min_size=1, max_size=size, kwargs={"autocommit": True}, open=False, name=name
    )


def _when(value: datetime | None) -> str:
    """A time for a person: UTC, to the second."""
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _age(value: datetime | None) -> str:
    if value is None:
        return "-"
    return seconds(max(0.0, (datetime.now(UTC) - value).total_seconds()))


def _seconds(value: float | None) -> str:
    return "-" if value is None else seconds(value)


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def templates() -> Jinja2Templates:
    """The pages' templates, escaping every value (no page ever renders markup it
    was given)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(when=_when, age=_age, seconds=_seconds, json=_json)
    return Jinja2Templates(env=env)


@dataclass
class Console:
    settings: ConsoleSettings
    grants: dict[str, Grant]
    resolver: ConnectionPool
    product: ConnectionPool
    control: ConnectionPool
    codec: EventCodec
    templates: Jinja2Templates
    metrics: ConsoleMetrics
    script: Path | None
    """htmx, when found verified (``infra.console.assets``)."""

    @property
    def script_url(self) -> str | None:
        return SCRIPT_PATH if self.script is not None else None

    @classmethod
    def of(cls, settings: ConsoleSettings, metrics: ConsoleMetrics) -> Console:
        size = settings.console_pool_size
        return cls(
            settings,
            settings.grants(),
            _pool(settings.resolver_dsn, size, "console-resolver"),
            _pool(settings.product_dsn, size, "console-product"),
            _pool(settings.control_dsn, size, "console-control"),
            codec_for(settings),
            templates(),
            metrics,
            find_script(settings),
        )

    def open(self) -> None:
        for pool in (self.resolver, self.product, self.control):
            pool.open()

    def close(self) -> None:
        for pool in (self.resolver, self.product, self.control):
            pool.close()

    @contextmanager
    def applier(self) -> Iterator[Applier]:
        """An applier of the live consumer, as ``gapless quarantine retry`` and
        ``gapless parked retry`` build one, for one action."""
        epochs = EpochSource(self.settings.control_dsn)
        applier = Applier(
            self.settings.product_dsn, epochs, self.codec, self.settings.agents_consumer
        )
        try:
            yield applier
        finally:
            applier.close()
            epochs.close()


def console(request: Request) -> Console:
    return cast(Console, request.app.state.console)


def render(request: Request, template: str, context: dict[str, Any], status: int = 200) -> Any:
    """A page: ``template`` with ``context``, the session (when there is one), the
    page's path and the script's URL (None: no script), for the layout."""
    page = {
        "session": getattr(request.state, "session", None),
        "path": request.url.path,
        "htmx": console(request).script_url,
        **context,
    }
    return console(request).templates.TemplateResponse(request, template, page, status_code=status)
