"""The agents' part of a trace: an ``agents apply`` span per traced event.

A message whose ``traceparent`` header names the relay's ``relay publish`` span (or,
from a relay that does not trace, the writer's span) gets a consumer span, its child,
once its batch committed: from the moment the batch was handed to the applier until
then, with the event's stream, position, id and type and what the applier made of it
(``processors.applier.traced_outcomes``). Only agents that trace
(``schemas.tracing.wanted``) read the header at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import Message
from opentelemetry.trace import SpanKind

from processors.applier.messages import RawMessage
from processors.applier.traced_outcomes import TracedOutcomes
from schemas import tracing
from schemas.codec import HEADER_TRACEPARENT

NAME = "agents apply"


def traceparent_header(message: Message) -> str | None:
    """The message's ``traceparent`` header, if it has one (a consumed message's
    headers are a list of name and bytes)."""
    headers = message.headers()
    found = dict(headers).get(HEADER_TRACEPARENT) if headers else None
    if isinstance(found, bytes):
        return found.decode("ascii", "replace")
    return found


def apply_spans(messages: Sequence[RawMessage], traced: TracedOutcomes, started_ns: int) -> None:
    """One ended span per traced message of a committed batch, from ``started_ns``."""
    for m in messages:
        if m.traceparent is None:
            continue
        event, outcome = traced.get((m.partition, m.offset), (None, "unknown"))
        attributes: dict[str, str | int] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "process",
            "messaging.destination.name": m.topic,
            "messaging.destination.partition.id": str(m.partition),
            "messaging.kafka.offset": m.offset,
            "gapless.outcome": outcome,
        }
        if event is not None:
            attributes |= {
                "gapless.stream": str(event.stream),
                "gapless.position": event.position,
                "gapless.event_id": str(event.event_id),
                "gapless.event_type": event.event_type,
            }
        span = tracing.child_of(
            m.traceparent, NAME, attributes, SpanKind.CONSUMER, start_time=started_ns
        )
        span.end()
