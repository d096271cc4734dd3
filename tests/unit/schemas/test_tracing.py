"""``schemas.tracing``: off (and free) without an OTLP endpoint; with a provider, spans
that continue a W3C ``traceparent``, the current span's ``traceparent`` and log ids, a
server span per request except the probes, and the log lines' trace ids."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from schemas import tracing
from schemas.logs import JsonFormatter

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
PARENT_TRACE = int("0af7651916cd43dd8448eb211c80319c", 16)
PARENT_SPAN = int("b7ad6b7169203331", 16)


def _parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


@pytest.fixture()
def no_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in tracing.ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_off_without_an_endpoint_every_function_does_nothing(no_endpoint: None) -> None:
    assert tracing.configure("relay") is False
    assert not tracing.wanted()
    assert tracing.current_traceparent() is None
    assert tracing.log_ids() is None
    with tracing.start_span("a") as span:
        assert span is None
        assert tracing.current_traceparent() is None
    with tracing.continued(PARENT, "b") as span:
        assert span is None
    app = FastAPI()
    tracing.trace_requests(app)
    assert app.user_middleware == []
    assert tracing.flush()


def test_the_endpoint_and_the_service_name_come_from_the_standard_variables() -> None:
    assert tracing.endpoint({}) is None
    assert tracing.endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}) is None
    assert tracing.endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://j:4318"}) == "http://j:4318"
    both = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://j:4318",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4318/v1/traces",
    }
    assert tracing.endpoint(both) == "http://t:4318/v1/traces"
    assert tracing.service_name("relay", {}) == "relay"
    assert tracing.service_name("relay", {"OTEL_SERVICE_NAME": "relay-eu"}) == "relay-eu"


def test_configure_turns_it_on_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "renamed")
    monkeypatch.setattr(tracing.trace, "set_tracer_provider", lambda provider: None)
    provider = None
    try:
        assert tracing.configure("relay") is True
        provider = tracing._provider
        assert provider is not None
        assert provider.resource.attributes["service.name"] == "renamed"
        assert tracing.configure("agents") is True
        assert tracing._provider is provider  # idempotent
        assert tracing.wanted()
    finally:
        tracing.install(None)
        if provider is not None:
            provider.shutdown()


def test_a_span_is_current_inside_its_block(recorded_spans: InMemorySpanExporter) -> None:
    with tracing.start_span("outer", {"gapless.position": 3}) as outer:
        assert outer is not None
        traceparent = tracing.current_traceparent()
        ids = tracing.log_ids()
        with tracing.start_span("inner"):
            inner_parent = tracing.current_traceparent()
    assert tracing.current_traceparent() is None
    inner, outer_span = recorded_spans.get_finished_spans()
    ctx = outer_span.get_span_context()
    assert ctx is not None
    assert traceparent == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
    assert ids == (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
    assert _parent_of(inner) == ctx.span_id
    assert inner_parent != traceparent
    assert outer_span.attributes == {"gapless.position": 3}


def test_continued_makes_the_traceparent_its_parent(recorded_spans: InMemorySpanExporter) -> None:
    with tracing.continued(PARENT, "capture run", kind=SpanKind.CONSUMER):
        here = tracing.current_traceparent()
    (span,) = recorded_spans.get_finished_spans()
    ctx = span.get_span_context()
    assert ctx is not None
    assert ctx.trace_id == PARENT_TRACE
    assert _parent_of(span) == PARENT_SPAN
    assert span.kind is SpanKind.CONSUMER
    assert here is not None and here.startswith("00-0af7651916cd43dd8448eb211c80319c-")


@pytest.mark.parametrize(
    "traceparent", [None, "", "garbage", "00-00000000000000000000000000000000-b7ad6b7169203331-01"]
)
def test_without_a_usable_traceparent_it_starts_a_trace(
    recorded_spans: InMemorySpanExporter, traceparent: str | None
) -> None:
    with tracing.continued(traceparent, "capture run"):
        pass
    (span,) = recorded_spans.get_finished_spans()
    assert span.parent is None


def test_an_exception_marks_the_span_failed(recorded_spans: InMemorySpanExporter) -> None:
    with pytest.raises(RuntimeError), tracing.continued(PARENT, "capture run"):
        raise RuntimeError("the database went away")
    (span,) = recorded_spans.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR


def test_child_of_is_not_current_and_ends_when_told(recorded_spans: InMemorySpanExporter) -> None:
    span = tracing.child_of(PARENT, "relay publish", kind=SpanKind.PRODUCER, start_time=1_000)
    assert tracing.current_traceparent() is None
    assert recorded_spans.get_finished_spans() == ()
    header = tracing.traceparent_of(span)
    tracing.failed(span, "not confirmed by Kafka")
    span.end()
    (done,) = recorded_spans.get_finished_spans()
    ctx = done.get_span_context()
    assert ctx is not None
    assert header == f"00-{PARENT_TRACE:032x}-{ctx.span_id:016x}-01"
    assert _parent_of(done) == PARENT_SPAN
    assert done.start_time == 1_000
    assert done.status.status_code is StatusCode.ERROR


def test_json_log_lines_carry_the_ids_only_inside_a_span(
    recorded_spans: InMemorySpanExporter,
) -> None:
    def line() -> dict[str, str]:
        record = logging.LogRecord("gapless.test", logging.INFO, __file__, 1, "hi", (), None)
        parsed: dict[str, str] = json.loads(JsonFormatter().format(record))
        return parsed

    assert "trace_id" not in line() and "span_id" not in line()
    with tracing.continued(PARENT, "capture run"):
        inside = line()
        ids = tracing.log_ids()
    assert ids is not None
    assert (inside["trace_id"], inside["span_id"]) == ids
    assert inside["trace_id"] == f"{PARENT_TRACE:032x}"


@pytest.fixture()
def traced_app(recorded_spans: InMemorySpanExporter) -> Iterator[TestClient]:
    app = FastAPI()

    @app.get("/items/{item_id}")
    def item(item_id: str) -> dict[str, str | None]:
        return {"item_id": item_id, "traceparent": tracing.current_traceparent()}

    for probe in tracing.UNTRACED_PATHS:
        app.add_api_route(probe, lambda: {"ok": True})
    tracing.trace_requests(app)
    with TestClient(app) as client:
        yield client


def test_requests_are_traced_but_not_the_probes(
    traced_app: TestClient, recorded_spans: InMemorySpanExporter
) -> None:
    for probe in tracing.UNTRACED_PATHS:
        assert traced_app.get(probe).status_code == 200
    assert recorded_spans.get_finished_spans() == ()
    answer = traced_app.get("/items/i1", headers={"traceparent": PARENT})
    (span,) = recorded_spans.get_finished_spans()  # no receive/send spans inside it
    assert span.name == "GET /items/{item_id}"
    assert span.kind is SpanKind.SERVER
    assert _parent_of(span) == PARENT_SPAN
    ctx = span.get_span_context()
    assert ctx is not None
    # The handler ran inside the request's span (the writer stores this one).
    flags = int(ctx.trace_flags)
    assert answer.json()["traceparent"] == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{flags:02x}"
