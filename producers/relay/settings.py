"""Relay settings from ``GAPLESS_*`` environment variables."""

from __future__ import annotations

from pydantic import Field

from db.settings import PauseSettings

DEFAULT_BATCH_SIZE = 5000
"""Rows per claim, per wait for delivery reports and per published-position update.

Each batch pays a fixed price (a Kafka round trip for its delivery reports, a COMMIT
with its WAL flush, the claim and the position read); it is read ``READ_CHUNK`` rows
at a time, each chunk sent while the next is read. A crash re-publishes at most one
batch of a stream. docs/benchmarks-log.md has the measurements behind both numbers.
"""
DEFAULT_GATHER_SECONDS = 0.02
"""How long after a pass began the next one may start when a NOTIFY wakes the relay.

Each pass pays its fixed price however few rows it finds; at a steady stream of
one-item commits the relay otherwise makes a pass for nearly every commit. A backlog
(a full batch found) and the poll go on at once regardless."""
READ_CHUNK = 1000
"""Rows per read of a batch: one statement, then handed to the producer at once."""


class RelaySettings(PauseSettings):
    relay_batch_size: int = Field(
        default=DEFAULT_BATCH_SIZE, ge=1, le=100_000, description="GAPLESS_RELAY_BATCH_SIZE"
    )
    relay_poll_seconds: float = Field(
        default=1.0, gt=0, description="GAPLESS_RELAY_POLL_SECONDS: poll even without NOTIFY."
    )
    relay_gather_seconds: float = Field(
        default=DEFAULT_GATHER_SECONDS,
        ge=0,
        le=1.0,
        description="GAPLESS_RELAY_GATHER_SECONDS: a pass woken by NOTIFY starts no sooner"
        " than this after the previous pass began, so the commits of those milliseconds"
        " share one pass (0: at once).",
    )
    relay_delivery_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="GAPLESS_RELAY_DELIVERY_TIMEOUT_SECONDS: how long a batch waits for the"
        " broker's delivery reports; one still missing some is published again later.",
    )
    relay_http_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="GAPLESS_RELAY_HTTP_PORT: /healthz, /readyz and /metrics; 0 disables.",
    )
    relay_http_host: str = Field(
        default="127.0.0.1",
        min_length=1,
        description="GAPLESS_RELAY_HTTP_HOST: the address the probes listen on (the image:"
        " 0.0.0.0).",
    )
