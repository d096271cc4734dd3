"""Capture worker settings from ``GAPLESS_*`` environment variables."""

from __future__ import annotations

import os
import socket

from pydantic import AliasChoices, Field

from db.settings import PauseSettings
from schemas.settings import ObjectStoreSettings
from schemas.topics import JOBS_TOPIC


def _default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class WorkerSettings(PauseSettings, ObjectStoreSettings):
    """``gapless resolver-worker``: processes capture jobs from ``intake.jobs.v1``
    (hides what was given in errors, as ``ObjectStoreSettings`` does: the S3 keys)."""

    jobs_topic: str = Field(default=JOBS_TOPIC, description="GAPLESS_JOBS_TOPIC")
    worker_id: str = Field(
        default_factory=_default_worker_id,
        min_length=1,
        description="GAPLESS_WORKER_ID: names this process's job claims (default host-pid).",
    )
    worker_group: str = Field(
        default="gapless-resolver-worker",
        description="GAPLESS_WORKER_GROUP: the Kafka consumer group of the workers.",
    )
    worker_concurrency: int = Field(
        default=4, ge=1, le=64, description="GAPLESS_WORKER_CONCURRENCY: jobs run at once."
    )
    worker_claim_seconds: float = Field(
        default=300.0,
        ge=5,
        # The job's hold was called a lease before; the old name still works.
        validation_alias=AliasChoices(
            "GAPLESS_WORKER_CLAIM_SECONDS", "GAPLESS_WORKER_LEASE_SECONDS"
        ),
        description="GAPLESS_WORKER_CLAIM_SECONDS (deprecated alias:"
        " GAPLESS_WORKER_LEASE_SECONDS): a claimed job is another worker's to resume this"
        " long after its worker last renewed the claim (it renews while it works).",
    )
    worker_settle_batch: int = Field(
        default=50,
        ge=1,
        le=1000,
        description="GAPLESS_WORKER_SETTLE_BATCH: products of a capture settled in one"
        " transaction at most (1: each in its own). A batch holds its catalog's stream lock"
        " until it commits, so other writers of that catalog wait up to one batch.",
    )
    worker_item_max_attempts: int = Field(
        default=5,
        ge=1,
        le=100,
        description="GAPLESS_WORKER_ITEM_MAX_ATTEMPTS: attempts of one product before it is"
        " left 'failed' for an operator.",
    )
    worker_job_max_attempts: int = Field(
        default=5,
        ge=1,
        le=100,
        description="GAPLESS_WORKER_JOB_MAX_ATTEMPTS: runs of a job whose capture cannot be"
        " read (the object store down) before the job is left 'failed'.",
    )
    worker_retry_base_seconds: float = Field(
        default=5.0, gt=0, description="GAPLESS_WORKER_RETRY_BASE_SECONDS"
    )
    worker_retry_cap_seconds: float = Field(
        default=900.0, gt=0, description="GAPLESS_WORKER_RETRY_CAP_SECONDS"
    )
    worker_scan_interval_seconds: float = Field(
        default=10.0,
        gt=0,
        description="GAPLESS_WORKER_SCAN_INTERVAL_SECONDS: how often the repair scan looks for"
        " due retries, expired claims and jobs whose message never came.",
    )
    worker_scan_page_size: int = Field(
        default=100, ge=1, le=10_000, description="GAPLESS_WORKER_SCAN_PAGE_SIZE"
    )
    worker_scan_max_pages: int = Field(
        default=10, ge=1, description="GAPLESS_WORKER_SCAN_MAX_PAGES: pages per scan at most."
    )
    worker_orphaned_after_seconds: float = Field(
        default=120.0,
        ge=0,
        description="GAPLESS_WORKER_ORPHANED_AFTER_SECONDS: an enqueued job no worker took this"
        " long is taken by the repair scan (its message was lost or is late).",
    )
    worker_s3_cluster_concurrency: int = Field(
        default=0,
        ge=0,
        le=1024,
        description="GAPLESS_WORKER_S3_CLUSTER_CONCURRENCY: object-store reads in flight across"
        " every worker (slots are PostgreSQL advisory locks); 0: only the per-process"
        " GAPLESS_S3_MAX_CONCURRENCY bound applies.",
    )
    worker_http_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="GAPLESS_WORKER_HTTP_PORT: /healthz, /readyz and /metrics; 0 disables.",
    )
    worker_http_host: str = Field(
        default="127.0.0.1",
        min_length=1,
        description="GAPLESS_WORKER_HTTP_HOST: the address the probes listen on (the image:"
        " 0.0.0.0).",
    )
