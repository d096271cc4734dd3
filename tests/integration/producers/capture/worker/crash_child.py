"""Run as a child process: run one capture job and die by SIGKILL at a chosen point.

``mid-product``: the worker settling one product per transaction, inside the
transaction of the job's third product, after its outcome, its decision's facts, the
checkpoint's move and the outbox rows are written, just before COMMIT.
``mid-batch``: the worker settling its products in batches, at the same point of the
first batch's transaction. ``before-finish``: after
every product is committed, before the job's status is recorded (and before any
Kafka offset would be committed).

Usage: python -m tests.integration.producers.capture.worker.crash_child JOB_ID POINT
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from typing import Any

from db.repositories import capture_jobs
from db.stream_writer import StreamWriter
from producers.capture.worker.service import build
from producers.capture.worker.settings import WorkerSettings


def die(*_args: Any, **_kwargs: Any) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    job_id, point = uuid.UUID(sys.argv[1]), sys.argv[2]
    batch = None
    if point in ("mid-product", "mid-batch"):
        real = StreamWriter.flush
        calls = 0
        batch, dies_at = (1, 3) if point == "mid-product" else (None, 1)

        def flush_then_die(self: StreamWriter) -> Any:
            nonlocal calls
            calls += 1
            written = real(self)
            if calls == dies_at:
                die()
            return written

        StreamWriter.flush = flush_then_die  # type: ignore[method-assign]
    elif point == "before-finish":
        capture_jobs.finish = die  # type: ignore[assignment]
    else:
        sys.exit(f"unknown point {point!r}")
    settings = WorkerSettings(worker_id="doomed-child")
    if batch is not None:
        settings = settings.model_copy(update={"worker_settle_batch": batch})
    wiring = build(settings)
    wiring.worker.run(job_id)
    sys.exit("not killed")


if __name__ == "__main__":
    main()
