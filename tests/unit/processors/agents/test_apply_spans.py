"""The agents' ``agents apply`` spans: one per traced message, child of its
``traceparent`` header, naming the event and what the applier made of it; only for
a batch that has traced messages in agents that trace."""

from __future__ import annotations

import uuid

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from processors.agents.spans import apply_spans, traceparent_header
from processors.applier.messages import Decoded, RawMessage
from processors.applier.plan import APPLIED, PARKED
from processors.applier.traced_outcomes import (
    DUPLICATE,
    kept_for,
    note_aside,
    note_judged,
)
from schemas.events import CatalogItemUpserted
from tests.unit.processors.builders import event, ref

PUBLISH = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _message(offset: int, traceparent: str | None = PUBLISH) -> RawMessage:
    return RawMessage("catalog.events.v1", 2, offset, b"k", b"v", traceparent=traceparent)


def _decoded(offset: int, position: int, traceparent: str | None = PUBLISH) -> Decoded:
    upserted = CatalogItemUpserted(class_id="lamp", status="active", title=f"i{position}")
    return Decoded(
        _message(offset, traceparent),
        event(position, ref("catalog_item", "i1", position), upserted),
    )


class _Message:
    def __init__(self, headers: list[tuple[str, bytes]] | None) -> None:
        self._headers = headers

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers


def test_the_header_is_read_from_the_message() -> None:
    found = _Message([("event_id", b"e"), ("traceparent", PUBLISH.encode())])
    assert traceparent_header(found) == PUBLISH  # type: ignore[arg-type]
    assert traceparent_header(_Message(None)) is None  # type: ignore[arg-type]
    assert traceparent_header(_Message([("event_id", b"e")])) is None  # type: ignore[arg-type]


def test_outcomes_are_kept_only_for_traced_batches_in_agents_that_trace(
    recorded_spans: InMemorySpanExporter,
) -> None:
    assert kept_for([_message(1, None), _message(2, None)]) is None
    assert kept_for([_message(1, None), _message(2)]) == {}


def test_outcomes_are_not_kept_when_the_agents_do_not_trace() -> None:
    assert kept_for([_message(1)]) is None


def test_each_traced_message_gets_a_span_under_its_header(
    recorded_spans: InMemorySpanExporter,
) -> None:
    applied, seen, parked, untraced = (
        _decoded(10, 1),
        _decoded(11, 1),
        _decoded(12, 3),
        _decoded(13, 4, None),
    )
    traced = kept_for([d.message for d in (applied, seen, parked, untraced)])
    assert traced is not None
    note_judged(
        traced,
        [applied, seen, parked, untraced],
        {applied.event.event_id: APPLIED, parked.event.event_id: PARKED, uuid.uuid4(): APPLIED},
        {("t1", "c1"): 1},
    )
    undecodable = _message(14)
    note_aside(traced, [undecodable], [], [], [])
    messages = [applied.message, seen.message, parked.message, untraced.message, undecodable]
    apply_spans(messages, traced, started_ns=1_000)

    spans = recorded_spans.get_finished_spans()
    assert [s.name for s in spans] == ["agents apply"] * 4  # not the untraced one
    outcomes = [(s.attributes or {})["gapless.outcome"] for s in spans]
    # One the plan did not judge was a copy the inbox or the progress already had.
    assert outcomes == [APPLIED, DUPLICATE, PARKED, "quarantined"]
    first = spans[0]
    assert first.kind is SpanKind.CONSUMER
    assert first.start_time == 1_000
    assert first.parent is not None and first.parent.span_id == int("b7ad6b7169203331", 16)
    attributes = first.attributes or {}
    assert attributes["gapless.stream"] == "t1/c1@1"
    assert attributes["gapless.position"] == 1
    assert attributes["gapless.event_id"] == str(applied.event.event_id)
    assert attributes["gapless.event_type"] == applied.event.event_type
    assert "gapless.event_id" not in (spans[3].attributes or {})


def test_an_event_the_plan_did_not_judge_is_a_duplicate_or_of_an_old_epoch(
    recorded_spans: InMemorySpanExporter,
) -> None:
    seen = _decoded(20, 5)
    traced = kept_for([seen.message])
    note_judged(traced, [seen], {}, {("t1", "c1"): 1})
    assert traced == {(2, 20): (seen.event, DUPLICATE)}
    note_judged(traced, [seen], {}, {("t1", "c1"): 2})
    assert traced == {(2, 20): (seen.event, "ignored_old_epoch")}
