"""One run of a capture job: claim, read, parse, then settle every product.

A run never holds a database transaction across the object store or the parser.
Each product is settled in a transaction of its own that also moves the job's
checkpoint by one (compare-and-set), so the checkpoint and the products' outcomes
are always committed together; see ``CaptureWorker.run`` for the steps and what a
crash between them leaves behind. The products' transactions are ``settling``'s; the
run's state and report are ``runs``'.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

import psycopg
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.control.pauses import PauseWatch
from db.exceptions import HistoryRewound, StreamPaused
from db.repositories import capture_items as items
from db.repositories import capture_jobs as jobs
from db.repositories import unknown_jobs
from db.repositories.capture_jobs import ClaimedJob
from db.resolver.commit_notifier import CommitNotifier
from db.unit_of_work import Transaction
from producers.capture.adapters import (
    ExtractedProduct,
    Extraction,
    RejectedItem,
    adapter_named,
    reparse_stored_raw,
)
from producers.capture.worker import checkpoints, metrics, sources
from producers.capture.worker.checkpoints import CheckpointLost
from producers.capture.worker.objects import EvidenceReader
from producers.capture.worker.outcomes import (
    JOB_GONE,
    Classified,
    RunAborted,
    classify,
    sanitize,
)
from producers.capture.worker.replays import REPLAY_KINDS
from producers.capture.worker.resolution import Resolve
from producers.capture.worker.retries import RetryPolicy
from producers.capture.worker.runs import Run, RunReport
from producers.capture.worker.settling import Settler
from producers.capture.worker.spans import run_span
from schemas.codec import EventCodec
from schemas.exceptions import RegistryUnavailable
from schemas.jobs import CAPTURE_JOB, JobMessage
from schemas.logs import event_fields

log = logging.getLogger(__name__)

SETTLE_BATCH = 50
"""Products settled in one transaction at most (``GAPLESS_WORKER_SETTLE_BATCH``)."""
PAUSED_RETRY_SECONDS = 5.0
"""How soon a job stopped by a paused catalog is tried again (no attempt counted)."""
REGISTRY_RETRY_SECONDS = 5.0
"""How soon a job held up by an unreachable schema registry is tried again (not
counted as a failure: the outage is no fault of the capture)."""

# Parse one capture's bytes with the named adapter (``parse_capture`` in production);
# raises ``AdapterError`` when the capture as a whole is unusable.
Parse = Callable[[str, bytes, str, str], Extraction]


def parse_capture(adapter: str, artifact: bytes, content_type: str, source_url: str) -> Extraction:
    """The capture's products, read by the adapter its source is bound to (a raw
    envelope decodes to its parts; any other artifact is its ``document`` part)."""
    extraction = reparse_stored_raw(adapter_named(adapter), artifact, content_type, source_url)
    assert extraction is not None  # the artifact is there
    return extraction


def next_batch(products: Sequence[ExtractedProduct], start: int, size: int) -> range:
    """The indices from ``start`` on to settle in one transaction: at most ``size``,
    ending before a source item comes twice (a product's result row is locked once
    per transaction, and a later product of the same source item must find the
    earlier one settled)."""
    seen: set[str] = set()
    for index in range(start, min(len(products), start + size)):
        item = products[index].source_item_id
        if item in seen:
            return range(start, index)
        seen.add(item)
    return range(start, min(len(products), start + size))


class ClaimLost(Exception):
    """This worker's claim on the job ran out and another run claimed it (or an
    operator acted on it): the run stops writing."""


class CaptureWorker:
    """Runs capture jobs; safe to call from several threads at once."""

    KINDS: tuple[str, ...] = (CAPTURE_JOB, REPLAY_KINDS)
    """The jobs it runs (LIKE patterns): captures, and replays of stored captures."""

    def __init__(
        self,
        pool: ConnectionPool,
        uow_pool: ConnectionPool,
        epochs: EpochSource,
        codec: EventCodec,
        reader: EvidenceReader,
        parse: Parse,
        resolve: Resolve,
        *,
        owner: str,
        claim_seconds: float,
        item_retries: RetryPolicy,
        job_retries: RetryPolicy,
        pauses: PauseWatch | None = None,
        notifier: CommitNotifier | None = None,
        settle_batch: int = SETTLE_BATCH,
    ) -> None:
        """``settle_batch``: products settled in one transaction at most (1: each
        in its own)."""
        self._pool = pool  # autocommit connections for the short job transactions
        self._settle_batch = settle_batch
        self._reader = reader
        self._parse = parse
        self._settler = Settler(
            uow_pool, epochs, codec, resolve, item_retries, pauses=pauses, notifier=notifier
        )
        self.owner = owner
        self._claim_seconds = claim_seconds
        self._job_retries = job_retries

    @contextmanager
    def _short(self) -> Iterator[Transaction]:
        with self._pool.connection() as conn, conn.transaction():
            yield Transaction(conn)

    def run(self, job_id: uuid.UUID, message: JobMessage | None = None) -> RunReport:
        """Run the job if it can be claimed now (``message``: the job message that
        asked for it, if one did).

        1. Claim it (one short transaction); a finished job, one under another
           worker's live claim, or a retry not yet due is left alone.
        2. Look up the source's binding; read the artifact from the object store
           (bounded; no transaction open); parse it. A failure here ends the run
           with the job ``retrying`` (budget left) or ``failed``.
        3. Record the adapter's refused products as ``rejected`` (one transaction).
        4. Load the checkpoint: every product before it is settled or has a durable
           retry record.
        5. Settle the due retries before the checkpoint, then every product from
           the checkpoint on, each in one transaction with the checkpoint's move
           (``Settler.settle``).
        6. End the run: ``retrying`` at the earliest product retry, ``failed`` when
           products ran out of retries, ``done`` otherwise.
        A crash anywhere leaves the job ``running`` under a claim that expires; the
        next run (any worker) starts again at 1 and resumes from the checkpoint,
        finding every settled product settled. A crash inside a product's
        transaction leaves neither its outcome nor the checkpoint's move.

        A job the database holds no row of is never dropped in silence. At 1 (a
        message for a job accepted after the backup a restore went back to, or whose
        capture was swept; asked by id alone, as the repair scan does for rows it
        found, it is ``not_claimed``), and after a run that lost its claim or aborted because
        the row went while the run had it in hand (a restore under way), the run
        ends ``unknown_job`` with the code ``JOB_GONE``, recorded in
        ``unknown_job_message`` in the same short transaction that found the row
        missing. Nothing of the job was committed: a product's transaction that
        would name it fails on its foreign keys.
        """
        with self._short() as tx:
            job = jobs.claim(tx, job_id, self.KINDS, self.owner, self._claim_seconds)
            gone = job is None and message is not None and jobs.get(tx, job_id) is None
            if gone and message is not None:
                unknown_jobs.record(
                    tx,
                    job_id,
                    message.tenant_id,
                    message.capture_id,
                    message.kind,
                    "message",
                    JOB_GONE,
                )
        if gone:
            return self._unknown(RunReport(job_id, "unknown_job"), "a job message named it")
        if job is None:
            metrics.RUNS.labels("not_claimed").inc()
            return RunReport(job_id, "not_claimed")
        report = RunReport(job_id, "aborted")
        try:
            with run_span(job, report):  # continues the accepting request's trace
                self._run(job, report)
        except ClaimLost:
            report.result = "claim_lost"
        except RunAborted as exc:
            report.result = "aborted"
            log.warning(
                "job %s aborted; its claim will expire: %s",
                job_id,
                exc,
                extra=event_fields(job_id=job_id),
            )
        except Exception as exc:  # the database went away between steps, …
            report.result = "aborted"
            log.warning(
                "job %s aborted; its claim will expire: %s",
                job_id,
                classify(exc).message,
                extra=event_fields(job_id=job_id),
            )
        if report.result in ("claim_lost", "aborted") and self._vanished(job):
            return self._unknown(report, "its row went while a run had it")
        metrics.RUNS.labels(report.result).inc()
        if report.result in metrics.SETTLED_RESULTS:
            waited = time.time() - job.created_at.timestamp()
            metrics.SETTLE.labels(report.result).observe(max(0.0, waited))
        return report

    def _vanished(self, job: ClaimedJob) -> bool:
        """Whether the job's row is gone, recording it as unknown if so (a database
        still away answers False: the claim expires and the repair scan finds the
        job, if it is there)."""
        try:
            with self._short() as tx:
                if jobs.get(tx, job.job_id) is not None:
                    return False
                unknown_jobs.record(
                    tx, job.job_id, job.tenant_id, job.capture_id, job.kind, "run", JOB_GONE
                )
                return True
        except psycopg.Error:
            return False

    def _unknown(self, report: RunReport, how: str) -> RunReport:
        report.result = "unknown_job"
        report.error_code = JOB_GONE
        metrics.RUNS.labels(report.result).inc()
        log.warning(
            "job %s is not in the resolver database (%s): nothing of it was done; its"
            " capture expired, or the database was restored to before it was accepted, and"
            " the collector must post it again (%s)",
            report.job_id,
            how,
            JOB_GONE,
            extra=event_fields(job_id=report.job_id),
        )
        return report

    def _run(self, job: ClaimedJob, report: RunReport) -> None:
        try:
            with self._short() as tx:
                binding = sources.binding_of(tx, job.tenant_id, job.source)
            artifact = self._reader.read(job.evidence_key, job.content_sha256)
            self._renew(job)
            extraction = self._parse(binding.adapter, artifact, job.content_type, job.source_url)
        except (ClaimLost, RunAborted):
            raise
        except Exception as exc:  # every failure before the products is the job's
            self._fail_job(job, report, classify(exc))
            return
        run = Run(
            job,
            binding,
            extraction.adapter,
            extraction.parser_version,
            extraction.products,
            report,
            time.monotonic(),
        )
        self._record_rejections(run, extraction.rejected)
        with self._short() as tx:
            start = checkpoints.start(tx, run.ref, len(run.products))
        report.checkpoint = start
        with self._short() as tx:
            retries = items.due_retries(tx, job.job_id, run.parser_version, start)
        where = {p.source_item_id: i for i, p in reversed(list(enumerate(run.products)))}
        try:
            for row in retries:
                if (index := where.get(row.source_item_id)) is not None:
                    self._renew_if_old(run)
                    self._settler.settle(run, index, None)
            try:
                self._settle_from(run, start)
            except CheckpointLost as lost:
                # Another run got further first: never write over its progress.
                report.checkpoint = lost.winner
                report.result = "stale"
                self._finish(job, "retrying", retry_in_seconds=0)
                return
        except (StreamPaused, HistoryRewound, RegistryUnavailable) as held:
            # The catalog is paused (or its history went back and waits for its fence),
            # or the schema registry does not answer: the products settled so far stay
            # settled, the checkpoint holds, and the job waits (no attempt counted,
            # for the job or its products) until the resume or the registry's return.
            registry = isinstance(held, RegistryUnavailable)
            report.result = "registry_unavailable" if registry else "paused"
            report.error_code = held.code
            self._finish(
                job,
                "retrying",
                retry_in_seconds=REGISTRY_RETRY_SECONDS if registry else PAUSED_RETRY_SECONDS,
                error_code=held.code,
                error=sanitize(held.message),
            )
            log.warning(
                "job %s waits: %s %s",
                job.job_id,
                held.code,
                sanitize(held.message),
                extra=event_fields(job_id=job.job_id),
            )
            return
        self._end(run)

    def _settle_from(self, run: Run, start: int) -> None:
        """Step 5's products from the checkpoint ``start`` on, in batches of up to
        ``settle_batch`` (``next_batch``), each settled in one transaction that moves
        the checkpoint past what it settled (``Settler.settle_many``: all of the
        batch, or up to a product that depended on an earlier one, which starts the
        next batch); a batch one of whose products failed is settled again one
        product per transaction, so the failure is recorded on that product alone."""
        index = start
        while index < len(run.products):
            batch = next_batch(run.products, index, self._settle_batch)
            self._renew_if_old(run)
            settled = self._settler.settle_many(run, batch) if len(batch) > 1 else None
            if settled is not None:
                index = run.report.checkpoint = settled
                continue
            for one in batch:
                self._renew_if_old(run)
                self._settler.settle(run, one, (one, one + 1))
                run.report.checkpoint = one + 1
            index = batch.stop

    # --- job level ----------------------------------------------------------------

    def _renew(self, job: ClaimedJob) -> None:
        with self._short() as tx:
            if not jobs.renew(tx, job.job_id, self.owner, self._claim_seconds):
                raise ClaimLost(str(job.job_id))

    def _renew_if_old(self, run: Run) -> None:
        if time.monotonic() - run.renewed_at > self._claim_seconds / 4:
            self._renew(run.job)
            run.renewed_at = time.monotonic()

    def _finish(
        self,
        job: ClaimedJob,
        status: str,
        *,
        retry_in_seconds: float | None = None,
        retry_at: datetime | None = None,
        error_code: str | None = None,
        error: str | None = None,
        count_failure: bool = False,
    ) -> None:
        with self._short() as tx:
            finished = jobs.finish(
                tx,
                job.job_id,
                self.owner,
                status,
                retry_in_seconds=retry_in_seconds,
                retry_at=retry_at,
                error_code=error_code,
                error=error,
                count_failure=count_failure,
            )
        if not finished:
            raise ClaimLost(str(job.job_id))

    def _fail_job(self, job: ClaimedJob, report: RunReport, failure: Classified) -> None:
        """A failure of the job as a whole: retried with backoff while its budget lasts
        (counted in ``run_failures``), then ``failed``; terminal ones at once."""
        delay = self._job_retries.delay_after(job.run_failures + 1) if failure.retryable else None
        status = "retrying" if delay is not None else "failed"
        self._finish(
            job,
            status,
            retry_in_seconds=delay,
            error_code=failure.code,
            error=failure.message,
            count_failure=failure.retryable,
        )
        report.result = status
        report.error_code = failure.code
        log.warning(
            "job %s %s: %s %s",
            job.job_id,
            status,
            failure.code,
            failure.message,
            extra=event_fields(job_id=job.job_id),
        )

    def _end(self, run: Run) -> None:
        with self._short() as tx:
            standing = items.outcomes(tx, run.job.job_id, run.parser_version)
        report = run.report
        if standing.next_retry_at is not None:
            self._finish(run.job, "retrying", retry_at=standing.next_retry_at)
            report.result = "retrying"
        elif failed := standing.of("failed"):
            report.result = "failed"
            report.error_code = "ITEMS_FAILED"
            self._finish(
                run.job,
                "failed",
                error_code="ITEMS_FAILED",
                error=f"{failed} product(s) ran out of retries; see `gapless captures failures`",
            )
        else:
            report.result = "done"
            self._finish(run.job, "done")

    # --- products (their settling is ``settling.Settler``'s) ------------------------

    def _record_rejections(self, run: Run, rejected: Sequence[RejectedItem]) -> None:
        """The adapter's refused products, as terminal ``rejected`` results keyed by
        their locator (they have no usable source item id). Idempotent."""
        if not rejected:
            return
        with self._short() as tx:
            for r in rejected:
                new = run.new_result(None, f"@{r.locator}", "", r.locator)
                if items.insert_rejected(tx, new, r.code, sanitize(r.message)):
                    run.report.count("rejected")
