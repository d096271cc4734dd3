"""A message as the agent received it: bytes plus where it came from; and decoded."""

from __future__ import annotations

from dataclasses import dataclass

from schemas.events import Envelope


@dataclass(frozen=True, slots=True)
class RawMessage:
    """``stream`` and ``position`` are set only where the sender vouches for them
    outside the bytes (the resolver's retained copies, fetched for one stream); an
    undecodable copy is then quarantined with them, and a skip can let progress pass
    its position."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    stream: tuple[str, str, int] | None = None
    position: int | None = None
    published_ms: int | None = None
    """Kafka's timestamp of the message (the relay's send), in ms; None elsewhere."""
    traceparent: str | None = None
    """Its ``traceparent`` header, read only by agents that trace (``schemas.tracing``)."""


@dataclass(frozen=True, slots=True)
class Decoded:
    """A message whose bytes decoded, with its event."""

    message: RawMessage
    event: Envelope
