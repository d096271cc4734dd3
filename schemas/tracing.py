"""Traces: the one home of OpenTelemetry in gapless (W3C trace context, OTLP export).

Off unless the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set when a process calls ``configure``;
then its spans go over OTLP/HTTP through a ``BatchSpanProcessor``, under the service
name ``OTEL_SERVICE_NAME`` or else the process's own (``resolver-api``, ``relay``,
``agents``, ``resolver-worker``, ``read-api``). The other ``OTEL_*`` variables of the
SDK and its exporter (``OTEL_BSP_SCHEDULE_DELAY``, ``OTEL_TRACES_SAMPLER``, headers,
timeouts) hold as documented by OpenTelemetry.

One capture is one trace from the API to the projection: the writer stores the
current span's ``traceparent`` with every outbox row (and the intake with its job),
the capture worker and the relay continue it, the relay sends it as the Kafka header
``traceparent``, and the agents continue it once more. The hot paths ask ``wanted()``
once per batch and do nothing more when it says no: with tracing off, every function
here returns after one comparison, and nothing of the SDK is imported.

It sits in ``schemas`` so the processes in ``producers`` and ``processors``, the
writer in ``db`` and the logs (``schemas.logs``) can all use it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import Attributes

if TYPE_CHECKING:
    from fastapi import FastAPI
    from opentelemetry.sdk.trace import TracerProvider

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
SERVICE_NAME_VARIABLE = "OTEL_SERVICE_NAME"
TRACEPARENT = "traceparent"
"""The W3C header (and Kafka header) that carries a span's context."""
# The requests no trace wants: probes and scrapes, every few seconds.
UNTRACED_PATHS = ("/healthz", "/readyz", "/metrics")

_PROPAGATOR = TraceContextTextMapPropagator()
_tracer: trace.Tracer | None = None
_provider: TracerProvider | None = None


def endpoint(env: Mapping[str, str] | None = None) -> str | None:
    """The OTLP endpoint traces go to, or None (tracing off)."""
    env = os.environ if env is None else env
    for name in ENDPOINT_VARIABLES:
        if env.get(name, "").strip():
            return env[name].strip()
    return None


def service_name(service: str, env: Mapping[str, str] | None = None) -> str:
    """``OTEL_SERVICE_NAME`` when set, else the process's own name."""
    env = os.environ if env is None else env
    return env.get(SERVICE_NAME_VARIABLE, "").strip() or service


def configure(service: str) -> bool:
    """Turn tracing on for this process if an OTLP endpoint is configured; whether it
    is on. Idempotent: a second call changes nothing. The spans still buffered are
    exported when the process exits (the provider's own exit hook)."""
    if _provider is not None:
        return True
    if endpoint() is None:
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name(service)}))
    # The exporter reads the endpoint, headers and timeout from the OTEL_* variables.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    install(provider)
    trace.set_tracer_provider(provider)  # for any library that asks the global one
    return True


def install(provider: TracerProvider | None) -> None:
    """Trace with ``provider`` from now on (None: tracing off). ``configure`` calls it;
    the tests hand it a provider with an in-memory exporter."""
    global _tracer, _provider
    _provider = provider
    _tracer = None if provider is None else provider.get_tracer("gapless")


def wanted() -> bool:
    """Whether this process traces: the hot paths ask once, and skip all work if not."""
    return _tracer is not None


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the current span, or None (tracing off, no span)."""
    if _tracer is None:
        return None
    return traceparent_of(trace.get_current_span())


def traceparent_of(span: Span) -> str | None:
    """``span``'s W3C ``traceparent`` (None for an invalid span)."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def log_ids() -> tuple[str, str] | None:
    """The current span's trace id and span id in hex, for a log line; None outside
    a span (or with tracing off)."""
    if _tracer is None:
        return None
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def _parent(traceparent: str | None) -> Context:
    """The context whose span is the remote parent ``traceparent`` names (an empty
    context, so a new trace, when it is None or malformed)."""
    return _PROPAGATOR.extract({TRACEPARENT: traceparent} if traceparent else {})


@contextmanager
def start_span(
    name: str, attributes: Attributes = None, kind: SpanKind = SpanKind.INTERNAL
) -> Iterator[Span | None]:
    """A span, current inside the block, child of the current span; yields None (and
    costs nothing) with tracing off. An exception leaving the block marks it failed."""
    if _tracer is None:
        yield None
        return
    with _tracer.start_as_current_span(name, kind=kind, attributes=attributes) as span:
        yield span


@contextmanager
def continued(
    traceparent: str | None,
    name: str,
    attributes: Attributes = None,
    kind: SpanKind = SpanKind.INTERNAL,
) -> Iterator[Span | None]:
    """A span, current inside the block, whose parent is the span ``traceparent``
    names (through the W3C propagator); a new trace when there is none. Yields None
    with tracing off."""
    if _tracer is None:
        yield None
        return
    with _tracer.start_as_current_span(
        name, context=_parent(traceparent), kind=kind, attributes=attributes
    ) as span:
        yield span


def child_of(
    traceparent: str,
    name: str,
    attributes: Attributes = None,
    kind: SpanKind = SpanKind.INTERNAL,
    start_time: int | None = None,
) -> Span:
    """A started span whose parent is ``traceparent``, not made current: for work
    done for many traces at once (a relay batch, an applier batch), where the caller
    ends each span itself. Only with tracing on (``wanted()``)."""
    assert _tracer is not None, "child_of is for a process that traces (wanted())"
    return _tracer.start_span(
        name,
        context=_parent(traceparent),
        kind=kind,
        attributes=attributes,
        start_time=start_time,
    )


def failed(span: Span, description: str) -> None:
    """Mark ``span`` failed, with a short description of why."""
    span.set_status(trace.Status(trace.StatusCode.ERROR, description))


def trace_requests(app: FastAPI) -> None:
    """A server span for every request of the FastAPI ``app`` (continuing a caller's
    ``traceparent``), except the probes and the scrapes, and without the ASGI
    receive/send spans inside it. Nothing with tracing off."""
    if _provider is None:
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(
        app,
        tracer_provider=_provider,
        excluded_urls=",".join(f"{path}$" for path in UNTRACED_PATHS),
        exclude_spans=["receive", "send"],
    )


def flush(timeout_s: float = 10.0) -> bool:
    """Export the spans still buffered now (True with tracing off)."""
    if _provider is None:
        return True
    return bool(_provider.force_flush(int(timeout_s * 1000)))
