"""The relay's ``traceparent`` header: the stored one passed on unchanged by a relay
that does not trace, its own ``relay publish`` span's (child of the stored one, ended
when Kafka confirmed) by one that does, and none for a row written untraced."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from db.resolver.outbox import StoredRow
from producers.relay.exceptions import PublishFailed
from producers.relay.publisher import Publisher
from schemas import tracing
from schemas.codec import HEADER_TRACEPARENT

WRITE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
EVENT = "6f3c4bd2-3a4e-4f4c-9d7e-2f1b0a9c8e71"


class _Producer:
    """Takes ``produce`` calls; ``flush`` reports each delivered (or failed)."""

    def __init__(self, error: Any = None) -> None:
        self.sent: list[dict[str, bytes]] = []
        self._reports: list[Callable[[Any, Any], None]] = []
        self._error = error

    def produce(self, topic: str, value: bytes, key: bytes, **kw: Any) -> None:
        self.sent.append({name: v for name, v in kw["headers"]})
        self._reports.append(kw["on_delivery"])

    def flush(self, timeout: float) -> int:
        for report in self._reports:
            report(self._error, None)
        self._reports.clear()
        return 0


def _publisher(producer: _Producer) -> Publisher:
    publisher = Publisher("127.0.0.1:1", "test.events", delivery_timeout_s=1.0)
    publisher._producer = producer  # type: ignore[assignment]
    return publisher


def _row(position: int, trace_context: str | None) -> StoredRow:
    return (position, EVENT, 1, b"key", b"value", 0.0, trace_context)


def test_untraced_the_stored_traceparent_goes_on_unchanged() -> None:
    assert not tracing.wanted()
    producer = _Producer()
    _publisher(producer).publish([_row(1, WRITE), _row(2, None)])
    first, second = producer.sent
    assert first[HEADER_TRACEPARENT] == WRITE.encode()
    assert HEADER_TRACEPARENT not in second
    assert second["event_id"] == EVENT.encode() and second["history_epoch"] == b"1"


def test_traced_the_header_names_a_publish_span_under_the_write(
    recorded_spans: InMemorySpanExporter,
) -> None:
    producer = _Producer()
    publisher = _publisher(producer)
    publisher.send([_row(7, WRITE), _row(8, None)])
    assert recorded_spans.get_finished_spans() == ()  # open until Kafka confirms
    publisher.confirm()
    (span,) = recorded_spans.get_finished_spans()
    ctx = span.get_span_context()
    assert ctx is not None and span.parent is not None
    assert span.name == "relay publish"
    assert span.kind is SpanKind.PRODUCER
    assert span.parent.span_id == int("b7ad6b7169203331", 16)
    assert ctx.trace_id == int("0af7651916cd43dd8448eb211c80319c", 16)
    assert (span.attributes or {})["gapless.position"] == 7
    header = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-01"
    assert producer.sent[0][HEADER_TRACEPARENT] == header.encode()
    assert HEADER_TRACEPARENT not in producer.sent[1]


def test_a_batch_kafka_did_not_confirm_ends_its_spans_failed(
    recorded_spans: InMemorySpanExporter,
) -> None:
    publisher = _publisher(_Producer(error="broker down"))
    with pytest.raises(PublishFailed):
        publisher.publish([_row(1, WRITE)])
    (span,) = recorded_spans.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
