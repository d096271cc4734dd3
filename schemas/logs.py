"""Structured logs: one JSON object per line for machines, plain text for a terminal.

Every long-running process calls ``configure_logging`` once at start-up. A record
about one event carries it in ``extra`` (``event_fields``), and the JSON line has its
``stream``, ``position`` and ``event_id`` (or a capture job's ``job_id``) beside
``ts``, ``level``, ``logger`` and ``msg``; a record logged inside a span
(``schemas.tracing``) has its ``trace_id`` and ``span_id`` too. It sits in
``schemas`` so the processes in ``producers`` and ``processors`` can use it as well as
``infra``.
"""

from __future__ import annotations

import json
import logging
import logging.config
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

from schemas.ids import StreamId
from schemas.settings import LogSettings
from schemas.tracing import log_ids

# The extra fields a record may carry, in the order they are written.
EVENT_FIELDS = ("stream", "position", "event_id", "job_id")


def event_fields(
    stream: StreamId | tuple[str, str, int] | None = None,
    position: int | None = None,
    event_id: uuid.UUID | str | None = None,
    job_id: uuid.UUID | str | None = None,
) -> dict[str, Any]:
    """``extra=`` for a log record about one event, stream or capture job, without the
    unknowns; a stream is written ``tenant/catalog@epoch``."""
    if isinstance(stream, tuple):
        stream = StreamId(*stream)
    found: dict[str, Any] = {
        "stream": None if stream is None else str(stream),
        "position": position,
        "event_id": None if event_id is None else str(event_id),
        "job_id": None if job_id is None else str(job_id),
    }
    return {k: v for k, v in found.items() if v is not None}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line whatever the message holds (quotes,
    newlines and a traceback are escaped by ``json.dumps``)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in EVENT_FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                line[name] = value if isinstance(value, int | float | bool) else str(value)
        # Formatted in the thread that logs, so the current span is the record's.
        ids = log_ids()
        if ids is not None:
            line["trace_id"], line["span_id"] = ids
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        # Compact, as the lines have always been written: greps for '"msg":"…"' hold.
        return json.dumps(line, ensure_ascii=False, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """A line for a person at a terminal; the event's fields follow the message."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        found = [f"{n}={record.__dict__[n]}" for n in EVENT_FIELDS if n in record.__dict__]
        if not found:
            return text
        head, newline, rest = text.partition("\n")
        return f"{head}  [{' '.join(found)}]{newline}{rest}"


def logging_config(settings: LogSettings, terminal: bool) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` configuration: the root logger to stderr as JSON
    or text (unset: text on a ``terminal``, else JSON) at the configured level. Faust's
    worker takes it as its ``logging_config``."""
    fmt = settings.log_format or ("text" if terminal else "json")
    formatter = JsonFormatter if fmt == "json" else TextFormatter
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"gapless": {"()": f"{__name__}.{formatter.__name__}"}},
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "gapless",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": settings.log_level, "handlers": ["default"]},
    }


def configure_logging(settings: LogSettings | None = None) -> None:
    """Send every record to stderr as JSON or text, replacing the handlers set before."""
    settings = settings or LogSettings()
    logging.config.dictConfig(logging_config(settings, sys.stderr.isatty()))
