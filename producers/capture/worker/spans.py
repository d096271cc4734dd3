"""The capture worker's part of a trace: a ``capture run`` span per run of a job,
continuing the trace of the request that accepted the capture
(``intake_job.trace_context``), and inside it a ``capture decide`` span per product
settled. A decision's outbox rows are written inside its product's span, so they
carry that span's ``traceparent`` (``db.stream_writer``) and the relay and the agents
continue from there. With tracing off (``schemas.tracing``) both are no-ops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from opentelemetry.trace import SpanKind

from db.repositories.capture_jobs import ClaimedJob
from producers.capture.worker.runs import Run, RunReport
from schemas import tracing

RUN = "capture run"
DECIDE = "capture decide"


@contextmanager
def run_span(job: ClaimedJob, report: RunReport) -> Iterator[None]:
    """Around a run of ``job``: its span ends with the run's result (``report``)."""
    attributes: dict[str, str | int] = {
        "gapless.job_id": str(job.job_id),
        "gapless.job_kind": job.kind,
        "gapless.tenant_id": job.tenant_id,
        "gapless.capture_id": str(job.capture_id),
        "gapless.source": job.source,
        "gapless.run": job.runs,
    }
    with tracing.continued(job.trace_context, RUN, attributes, SpanKind.CONSUMER) as span:
        try:
            yield
        finally:
            if span is not None:
                span.set_attribute("gapless.result", report.result)


def decided(run: Run, index: int, settle: Callable[[], str | None]) -> str | None:
    """``settle()`` (product ``index`` of ``run``) inside its ``capture decide`` span,
    which records the outcome; returns the outcome."""
    if not tracing.wanted():
        return settle()
    product = run.products[index]
    attributes: dict[str, str | int] = {
        "gapless.job_id": str(run.job.job_id),
        "gapless.product_index": index,
        "gapless.source_item_id": product.source_item_id,
    }
    with tracing.start_span(DECIDE, attributes) as span:
        outcome = settle()
        if span is not None:
            span.set_attribute("gapless.outcome", outcome or "settled_before")
        return outcome
