"""Evidence sweep settings from ``GAPLESS_*`` environment variables."""

from __future__ import annotations

import os
import socket

from pydantic import Field

from db.settings import DatabaseSettings
from schemas.settings import ObjectStoreSettings


def _default_sweeper_id() -> str:
    return f"evidence-sweeper@{socket.gethostname()}-{os.getpid()}"


class EvidenceSweepSettings(DatabaseSettings, ObjectStoreSettings):
    """``gapless evidence sweep`` and ``gapless evidence-sweeper`` (hides what was
    given in errors, as ``ObjectStoreSettings`` does: the S3 keys)."""

    evidence_retention_seconds: float = Field(
        default=30 * 86_400.0,
        ge=0,
        description="GAPLESS_EVIDENCE_RETENTION_SECONDS: an unreferenced capture (and an"
        " object no capture names) is kept this long after it arrived.",
    )
    evidence_sweep_interval_seconds: float = Field(
        default=3600.0,
        gt=0,
        description="GAPLESS_EVIDENCE_SWEEP_INTERVAL_SECONDS: pause between passes.",
    )
    evidence_sweep_page_size: int = Field(
        default=200,
        ge=1,
        le=10_000,
        description="GAPLESS_EVIDENCE_SWEEP_PAGE_SIZE: expired captures read per page.",
    )
    evidence_sweep_max_captures: int = Field(
        default=10_000,
        ge=1,
        description="GAPLESS_EVIDENCE_SWEEP_MAX_CAPTURES: captures deleted per pass at most.",
    )
    evidence_sweep_http_port: int = Field(
        default=0,
        ge=0,
        le=65_535,
        description="GAPLESS_EVIDENCE_SWEEP_HTTP_PORT: /healthz, /readyz and /metrics; 0 disables.",
    )
    evidence_sweep_http_host: str = Field(
        default="127.0.0.1",
        min_length=1,
        description="GAPLESS_EVIDENCE_SWEEP_HTTP_HOST: the address the probes listen on (the"
        " image: 0.0.0.0).",
    )
    evidence_sweeper_id: str = Field(
        default_factory=_default_sweeper_id,
        min_length=1,
        description="GAPLESS_EVIDENCE_SWEEPER_ID: names this sweeper in the deletion audit.",
    )
