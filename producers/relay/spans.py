"""The relay's part of a trace: a ``relay publish`` span per traced outbox row.

A row the writer stored with a ``traceparent`` (``outbox.trace_context``) gets a
producer span, child of that write, from the moment it is handed to the producer
until Kafka confirmed its batch (``Publisher.confirm``); the message's
``traceparent`` header then names this span, so the agents' span is its child. A
batch that is not confirmed marks its spans failed (its rows are sent again, each
with a span of its own). Only a relay that traces (``schemas.tracing.wanted``) makes
these; one that does not sends the stored ``traceparent`` on unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.trace import Span, SpanKind

from db.resolver.outbox import StoredRow
from schemas import tracing

NAME = "relay publish"


def publish_span(row: StoredRow, stored: str, topic: str) -> tuple[Span, str]:
    """The started ``relay publish`` span of ``row``, whose write's ``traceparent``
    is ``stored``, and the ``traceparent`` header that names the span (``stored``
    itself when the span has no valid context)."""
    span = tracing.child_of(
        stored,
        NAME,
        {
            "messaging.system": "kafka",
            "messaging.operation.type": "send",
            "messaging.destination.name": topic,
            "gapless.event_id": row[1],
            "gapless.history_epoch": row[2],
            "gapless.position": row[0],
        },
        kind=SpanKind.PRODUCER,
    )
    return span, tracing.traceparent_of(span) or stored


def end_publish_spans(spans: Sequence[Span], failure: str | None) -> None:
    """End a batch's spans once Kafka answered for it (``failure``: why it was not
    confirmed, or None)."""
    for span in spans:
        if failure is not None:
            tracing.failed(span, failure)
        span.end()
