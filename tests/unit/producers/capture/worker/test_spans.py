"""The capture worker's spans: ``capture run`` continues the trace stored with the job,
``capture decide`` is a child of it per product, and what a decision writes inside it
carries its ``traceparent``."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from types import SimpleNamespace

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from db.repositories.capture_jobs import ClaimedJob
from producers.capture.worker.runs import RunReport
from producers.capture.worker.spans import decided, run_span
from schemas import tracing

ACCEPTED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
NOW = datetime(2027, 1, 1, tzinfo=UTC)


def _job(trace_context: str | None) -> ClaimedJob:
    return ClaimedJob(
        job_id=uuid.uuid4(),
        tenant_id="t1",
        kind="capture",
        runs=1,
        run_failures=0,
        capture_id=uuid.uuid4(),
        source="shop",
        instance_id="collector-1",
        schema_version=1,
        source_url="https://shop.example/feed.json",
        captured_at=NOW,
        created_at=NOW,
        content_type="application/json",
        content_sha256="0" * 64,
        size_bytes=1,
        evidence_key="k",
        trace_context=trace_context,
    )


def test_a_run_continues_the_accepting_request_and_each_decision_is_its_child(
    recorded_spans: InMemorySpanExporter,
) -> None:
    job = _job(ACCEPTED)
    report = RunReport(job.job_id, "aborted")
    run = SimpleNamespace(job=job, products=[SimpleNamespace(source_item_id="p0")])
    written: list[str | None] = []

    def settle() -> str:
        written.append(tracing.current_traceparent())  # what the writer would store
        return "applied"

    with run_span(job, report):
        assert decided(run, 0, settle) == "applied"  # type: ignore[arg-type]
        report.result = "done"
    decide, whole = recorded_spans.get_finished_spans()
    assert (whole.name, decide.name) == ("capture run", "capture decide")
    assert whole.kind is SpanKind.CONSUMER
    assert whole.parent is not None and whole.parent.span_id == int("b7ad6b7169203331", 16)
    whole_ctx, decide_ctx = whole.get_span_context(), decide.get_span_context()
    assert whole_ctx is not None and decide_ctx is not None
    assert decide.parent is not None and decide.parent.span_id == whole_ctx.span_id
    assert (whole.attributes or {})["gapless.result"] == "done"
    assert (whole.attributes or {})["gapless.capture_id"] == str(job.capture_id)
    assert (decide.attributes or {})["gapless.outcome"] == "applied"
    assert written == [f"00-{decide_ctx.trace_id:032x}-{decide_ctx.span_id:016x}-01"]


def test_a_job_accepted_untraced_starts_a_trace_of_its_own(
    recorded_spans: InMemorySpanExporter,
) -> None:
    job = _job(None)
    with run_span(job, RunReport(job.job_id, "aborted")):
        pass
    (whole,) = recorded_spans.get_finished_spans()
    assert whole.parent is None


def test_untraced_the_product_is_settled_without_a_span() -> None:
    run = SimpleNamespace(job=_job(None), products=[SimpleNamespace(source_item_id="p0")])
    assert decided(run, 0, lambda: None) is None  # type: ignore[arg-type]
