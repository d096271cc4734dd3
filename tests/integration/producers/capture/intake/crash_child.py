"""Run as a child process: accept one capture and die by SIGKILL inside the
transaction, after the artifact put and before COMMIT.

Usage: python -m tests.integration.producers.capture.intake.crash_child RESOLVER_DSN KEY CONTENT_HEX
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import UTC, datetime
from typing import Any

from psycopg_pool import ConnectionPool

from db.repositories import capture_jobs
from producers.capture.evidence import EvidenceStore
from producers.capture.intake.captures import CaptureSubmission, IntakeService
from producers.capture.intake.collectors import Collector
from producers.capture.intake.enqueue import JobEnqueuer
from producers.capture.settings import IntakeSettings


def main() -> None:
    dsn, key, content_hex = sys.argv[1:4]
    settings = IntakeSettings()

    def die(*_args: Any, **_kwargs: Any) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    capture_jobs.insert_pending = die  # type: ignore[assignment]  # after capture and receipt
    with ConnectionPool(dsn, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool:
        service = IntakeService(
            pool,
            EvidenceStore.from_settings(settings),
            JobEnqueuer(settings.kafka_bootstrap, "unused", 1.0),
            settings,
        )
        service.accept(
            Collector("client-a", "t1", "shop", "inst-a"),
            CaptureSubmission(
                idempotency_key=key,
                schema_version=1,
                source_url="https://shop.example/p/1",
                captured_at=datetime(2026, 11, 30, 12, tzinfo=UTC),
                content_type="text/html; charset=utf-8",
                artifact=bytes.fromhex(content_hex),
            ),
        )
    sys.exit("not killed")


if __name__ == "__main__":
    main()
