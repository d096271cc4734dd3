"""What the console's forms accept, and the stable code of what they refuse."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from infra.console import inputs
from infra.console.exceptions import FormInvalid, ReasonEmpty, ReasonTooLong


def test_a_reason_is_trimmed_required_and_bounded() -> None:
    assert inputs.reason("  fixed the parser \n") == "fixed the parser"
    assert inputs.reason("", required=False) == ""
    for blank in ("", "   ", None):
        with pytest.raises(ReasonEmpty) as empty:
            inputs.reason(blank)
        assert empty.value.code == "FORM_REASON_EMPTY"
    assert inputs.reason("x" * inputs.MAX_REASON) == "x" * inputs.MAX_REASON
    with pytest.raises(ReasonTooLong) as long:
        inputs.reason("x" * (inputs.MAX_REASON + 1), required=False)
    assert long.value.code == "FORM_REASON_TOO_LONG"
    assert isinstance(long.value, FormInvalid)


def test_streams_durations_and_ids_parse_or_are_refused() -> None:
    assert inputs.stream("t1/c1/3") == ("t1", "c1", 3)
    assert inputs.stream("  ") is None
    assert inputs.duration("90s") == timedelta(seconds=90)
    assert inputs.duration("2h") == timedelta(hours=2)
    assert inputs.duration("") is None
    assert inputs.entry_id(" 12 ") == 12
    job = uuid.uuid4()
    assert inputs.capture_target(str(job)) == job
    assert inputs.capture_target("7") == 7
    assert inputs.name(" c1 ", "catalog") == "c1"
    assert inputs.optional_name("", "consumer") is None
    for bad in (
        lambda: inputs.stream("t1/c1"),
        lambda: inputs.stream("t1/c1/x"),
        lambda: inputs.duration("soon"),
        lambda: inputs.entry_id("12a"),
        lambda: inputs.entry_id("9" * 30),
        lambda: inputs.uuid_of("nope", "an event id"),
        lambda: inputs.capture_target("job-1"),
        lambda: inputs.name("a/b", "tenant"),
        lambda: inputs.name("x" * 201, "tenant"),
    ):
        with pytest.raises(FormInvalid) as refused:
            bad()
        assert refused.value.code == "FORM_INVALID"
