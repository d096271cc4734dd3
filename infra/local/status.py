"""What `status()` reports for one local service."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServiceStatus:
    """The observed state of one local service.

    `pid` is the server process when known (None when it is down, or when
    something else holds the port); `detail` is one human-readable line and says
    whether gapless started the process, i.e. whether `down` will stop it.
    """

    name: str
    running: bool
    address: str
    pid: int | None
    detail: str
    startup_s: float | None = None
    """Seconds from its start to answering, where the launcher measured them."""
    rss_mb: float | None = None
    """Its resident memory now, where the launcher reads it."""
