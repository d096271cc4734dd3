"""One run of a capture job in hand: what it works on (``Run``) and how it ended
(``RunReport``); shared by the pipeline, which drives the run, and the settling of its
products."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from db.repositories.capture_items import NewResult, ResultKey
from db.repositories.capture_jobs import ClaimedJob
from db.repositories.source_bindings import BindingRow
from producers.capture.adapters import ExtractedProduct
from producers.capture.worker import metrics
from producers.capture.worker.checkpoints import CheckpointRef


@dataclass
class RunReport:
    """How one run ended: ``done``, ``retrying``, ``failed`` (the job's new status),
    ``not_claimed`` (finished, under another live claim, or not due), ``stale``
    (another run moved the checkpoint first), ``paused`` (its catalog is paused: the
    job is ``retrying`` and counts no attempt), ``claim_lost``, ``aborted``, or
    ``unknown_job`` (the database holds no row of the job: ``JOB_GONE``)."""

    job_id: uuid.UUID
    result: str
    outcomes: dict[str, int] = field(default_factory=dict)
    checkpoint: int | None = None
    error_code: str | None = None

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        metrics.ITEMS.labels(outcome).inc()


@dataclass
class Run:
    """A claimed job with its parsed products, as one run works through them."""

    job: ClaimedJob
    binding: BindingRow
    adapter: str
    parser_version: int
    products: Sequence[ExtractedProduct]
    report: RunReport
    renewed_at: float

    @property
    def ref(self) -> CheckpointRef:
        return CheckpointRef(self.job.tenant_id, self.job.job_id, self.parser_version)

    def new_result(
        self, index: int | None, source_item_id: str, fingerprint: str, locator: str
    ) -> NewResult:
        j = self.job
        return NewResult(
            key=ResultKey(j.tenant_id, j.capture_id, source_item_id, self.parser_version),
            job_id=j.job_id,
            source=j.source,
            catalog_id=self.binding.catalog_id,
            adapter=self.adapter,
            item_index=index,
            schema_version=j.schema_version,
            fingerprint=fingerprint,
            locator=locator,
        )
