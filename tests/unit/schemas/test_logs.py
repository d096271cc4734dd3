"""The log formatter: one valid JSON object per line whatever the message holds, with
the event's fields when the record carries them; text for a terminal."""

from __future__ import annotations

import io
import json
import logging
import sys
import uuid
from collections.abc import Iterator

import pytest

from schemas.ids import StreamId
from schemas.logs import JsonFormatter, TextFormatter, configure_logging, event_fields
from schemas.settings import LogSettings


@pytest.fixture(autouse=True)
def root_logger() -> Iterator[None]:
    """Leave the root logger as the test found it (pytest's capture handlers)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("gapless.test", logging.ERROR, __file__, 1, msg, args, None)
    record.__dict__.update(extra)
    return record


def test_quotes_newlines_and_backslashes_stay_one_valid_line() -> None:
    msg = 'say "hi"\nthen {"not": json} \\ and\ttab'
    line = JsonFormatter().format(_record("%s", msg))
    assert "\n" not in line
    assert line.startswith('{"ts":"')  # compact, as the lines have always been written
    parsed = json.loads(line)
    assert parsed["msg"] == msg
    assert parsed["level"] == "ERROR"
    assert parsed["logger"] == "gapless.test"
    assert parsed["ts"].endswith("+00:00")
    assert set(parsed) == {"ts", "level", "logger", "msg"}


def test_the_event_fields_appear_when_the_record_carries_them() -> None:
    event_id = uuid.uuid4()
    extra = event_fields(StreamId("t1", "c1", 2), 17, event_id)
    parsed = json.loads(JsonFormatter().format(_record("quarantined", **extra)))
    assert parsed["stream"] == "t1/c1@2"
    assert parsed["position"] == 17
    assert parsed["event_id"] == str(event_id)
    assert event_fields(("t1", "c1", 2)) == {"stream": "t1/c1@2"}
    assert event_fields(job_id=event_id) == {"job_id": str(event_id)}


def test_a_traceback_stays_inside_the_one_line() -> None:
    try:
        raise ValueError('bad "value"\nsecond line')
    except ValueError:
        record = logging.LogRecord(
            "gapless.test", logging.ERROR, __file__, 1, "failed", (), sys.exc_info()
        )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    assert 'ValueError: bad "value"' in json.loads(line)["exc"]


def test_text_puts_the_event_fields_after_the_message() -> None:
    line = TextFormatter().format(_record("gap filled", **event_fields(("t", "c", 1), 4)))
    assert "ERROR" in line and "gapless.test: gap filled" in line
    assert line.endswith("[stream=t/c@1 position=4]")


def test_configure_picks_the_format_and_level(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging(LogSettings(log_format="json", log_level="warning"))
    logging.getLogger("gapless.x").info("hidden")
    logging.getLogger("gapless.x").warning('shown "quoted"', extra=event_fields(position=3))
    lines = capsys.readouterr().err.splitlines()
    assert [json.loads(line)["msg"] for line in lines] == ['shown "quoted"']
    assert json.loads(lines[0])["position"] == 3

    configure_logging(LogSettings(log_format="text"))
    logging.getLogger("gapless.x").info("plain")
    assert capsys.readouterr().err.rstrip().endswith("gapless.x: plain")

    # Unset: JSON unless stderr is a terminal (a captured stderr is not).
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    configure_logging(LogSettings())
    logging.getLogger("gapless.x").info("auto")
    assert json.loads(err.getvalue())["msg"] == "auto"


def test_bad_values_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from infra.config import ConfigurationError, load

    monkeypatch.setenv("GAPLESS_LOG_FORMAT", "xml")
    with pytest.raises(ConfigurationError, match="GAPLESS_LOG_FORMAT"):
        load(LogSettings)
    monkeypatch.setenv("GAPLESS_LOG_FORMAT", "text")
    monkeypatch.setenv("GAPLESS_LOG_LEVEL", "chatty")
    with pytest.raises(ConfigurationError, match="GAPLESS_LOG_LEVEL"):
        load(LogSettings)
