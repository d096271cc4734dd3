"""Settling a run's products: each product gets its outcome in one transaction that
also moves the job's checkpoint past it (compare-and-set), so the two always commit
together; a failed attempt is rolled back and recorded in a transaction of its own.
``Settler.settle`` is step 5 of ``CaptureWorker.run``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.control.pauses import PauseWatch
from db.exceptions import HistoryRewound, StreamPaused
from db.repositories import capture_batches as batches
from db.repositories import capture_items as items
from db.repositories.capture_batches import Settled
from db.repositories.capture_items import NewResult, SourceItemVersion
from db.resolver.commit_notifier import CommitNotifier
from db.unit_of_work import Transaction, UnitOfWork
from producers.capture.adapters import ExtractedProduct
from producers.capture.worker import checkpoints
from producers.capture.worker.checkpoints import CheckpointLost, CheckpointRef
from producers.capture.worker.outcomes import Classified, RunAborted, classify, sanitize
from producers.capture.worker.reads import CatalogReads, Read
from producers.capture.worker.resolution import ItemWork, Plan, Resolve, prefetch, written_by
from producers.capture.worker.retries import RetryPolicy
from producers.capture.worker.runs import Run
from producers.capture.worker.spans import decided
from producers.resolver.decisions import commit_staged, stage_decision
from producers.resolver.review_cases import open_case
from schemas.codec import EventCodec
from schemas.events import Envelope
from schemas.exceptions import RegistryUnavailable

log = logging.getLogger(__name__)


def claims_of(product: ExtractedProduct) -> list[tuple[str, str, str]]:
    """Every field the product states, as (field, value, locator) claims."""
    found = [
        ("class_id", product.class_id, product.locator),
        ("title", product.title, product.locator),
    ]
    for prefix, values in (
        ("identifiers", product.identifiers),
        ("attributes", product.attributes),
        ("offer", product.offer),
    ):
        found.extend((f"{prefix}.{name}", value, product.locator) for name, value in values.items())
    return found


class _ItemUnit(UnitOfWork):
    """A Unit of Work whose commit first moves the job's checkpoint by ``move`` (when
    there is one), so the products' outcomes and the checkpoint past them commit
    together."""

    def __init__(
        self,
        pool: ConnectionPool,
        epochs: EpochSource,
        codec: EventCodec,
        ref: CheckpointRef,
        move: tuple[int, int] | None,
        pauses: PauseWatch | None = None,
        notifier: CommitNotifier | None = None,
        late_errors: bool = False,
    ) -> None:
        super().__init__(pool, epochs, codec, pauses, notifier, late_errors)
        self._ref = ref
        self.move = move

    def commit(self) -> list[Envelope]:
        if self.move is not None:
            checkpoints.advance(self.tx, self._ref, *self.move)
        return super().commit()


@dataclass
class _Results:
    """The result rows of a batch's products, written together before it commits
    (``capture_batches``); nothing in the batch's transaction reads them before."""

    settled: list[Settled] = field(default_factory=list)
    versions: list[SourceItemVersion] = field(default_factory=list)

    @staticmethod
    def write(
        tx: Transaction,
        batch: _Results | None,
        work: ItemWork,
        settled: Settled,
        version: SourceItemVersion | None = None,
    ) -> None:
        """Step 5 of ``Settler._work``: at once without a batch, else kept for it."""
        s = dataclasses.replace(settled, claims=claims_of(work.product))
        if batch is not None:
            batch.settled.append(s)
            if version is not None:
                batch.versions.append(version)
            return
        items.settle(
            tx,
            s.key,
            s.outcome,
            item_id=s.item_id,
            decision_id=s.decision_id,
            case_id=s.case_id,
            error_code=s.error_code,
            error=s.error,
            claims=s.claims,
        )
        # Under the cursor lock this always succeeds; the compare-and-set is the guard.
        if version is not None and not items.advance_source_item(tx, version):
            raise RuntimeError("newer work on the source item was applied meanwhile")

    def flush(self, tx: Transaction) -> None:
        if not self.settled:
            return
        batches.settle(tx, self.settled)
        if batches.advance_source_items(tx, self.versions) != len(self.versions):
            raise RuntimeError("newer work on a source item was applied meanwhile")


class _Cut(Exception):
    """Product ``index`` may depend on what an earlier product of its batch wrote
    (``CatalogReads``): the batch ends before it."""

    def __init__(self, index: int) -> None:
        super().__init__(f"product {index} may depend on an earlier one of its batch")
        self.index = index


class Settler:
    """Settles one product at a time for the capture worker; safe to call from several
    threads at once."""

    def __init__(
        self,
        uow_pool: ConnectionPool,
        epochs: EpochSource,
        codec: EventCodec,
        resolve: Resolve,
        item_retries: RetryPolicy,
        pauses: PauseWatch | None = None,
        notifier: CommitNotifier | None = None,
    ) -> None:
        self._uow_pool = uow_pool
        self._epochs = epochs
        self._codec = codec
        self._resolve = resolve
        self._item_retries = item_retries
        self._pauses = pauses
        self._notifier = notifier

    def _unit(self, run: Run, move: tuple[int, int] | None, late_errors: bool = False) -> _ItemUnit:
        return _ItemUnit(
            self._uow_pool,
            self._epochs,
            self._codec,
            run.ref,
            move,
            self._pauses,
            self._notifier,
            late_errors,
        )

    def settle(self, run: Run, index: int, move: tuple[int, int] | None) -> None:
        """``_settle`` inside the product's ``capture decide`` span (``spans``)."""
        decided(run, index, lambda: self._settle(run, index, move))

    def _settle(self, run: Run, index: int, move: tuple[int, int] | None) -> str | None:
        """Give product ``index`` an outcome, moving the checkpoint by ``move`` in the
        same transaction; returns it (None: settled before). A failure rolls the
        attempt back, then a second transaction records it (with the move):
        ``rejected`` for a domain refusal, ``retryable`` or, the budget spent,
        ``failed`` otherwise. When even that cannot be written, the run aborts with
        the checkpoint where it was."""
        product = run.products[index]
        new = _new(run, index)
        try:
            outcome = self._attempt(run, new, product, move)
        except (CheckpointLost, StreamPaused, HistoryRewound, RegistryUnavailable):
            # Not this product's doing: the run stops (``CaptureWorker._run``) with
            # the checkpoint where it is and no attempt charged to the product.
            raise
        except Exception as exc:
            failure = classify(exc)
            log.info(
                "product %s of job %s failed: %s %s",
                product.source_item_id,
                run.job.job_id,
                failure.code,
                failure.message,
            )
            try:
                outcome = self._record_failure(run, new, move, failure)
            except CheckpointLost:
                raise
            except Exception as again:
                raise RunAborted(
                    f"the outcome of {product.source_item_id!r} could not be recorded:"
                    f" {classify(again).message}"
                ) from again
        if outcome is not None:
            run.report.count(outcome)
        return outcome

    def settle_many(self, run: Run, indices: range) -> int | None:
        """Settle products ``indices`` (no source item twice; the checkpoint at their
        start) in one transaction that also moves the checkpoint past them
        (``_attempt_many``); returns where the checkpoint now is: past them, or past
        fewer when a product depended on an earlier one of the batch (it was not
        settled: it starts the next batch). None, with nothing of it committed, when
        one of them failed: the caller then settles them one by one (``settle``), so
        each failure is recorded on its own product and the others settle as they
        would alone."""
        try:
            try:
                return self._attempt_many(run, indices)
            except _Cut as cut:
                # Again without it: the same state, so the same outcomes before it.
                return self._attempt_many(run, range(indices.start, cut.index))
        except (CheckpointLost, StreamPaused, HistoryRewound, RegistryUnavailable):
            raise  # the run stops, as for one product (``_settle``)
        except Exception as exc:
            log.info(
                "products %d-%d of job %s go one by one: %s",
                indices.start,
                indices.stop - 1,
                run.job.job_id,
                classify(exc).message,
            )
            return None

    def _attempt_many(self, run: Run, indices: range) -> int:
        """Steps 1-7 of ``_attempt`` for several products in one transaction.

        1. lock their result rows together (``lock_many``);
        2. lock the stream's cursor, then read ahead what resolving the workable ones
           will read (``resolution.prefetch``);
        3. work each workable one in order (``_work``), each seeing what those before
           it wrote. A product that read anything an earlier one wrote raises
           ``_Cut`` before writing (what it read ahead may be stale), and so does a
           product after one whose plan holds a fact of a kind ``written_by`` does
           not know; the whole transaction rolls back and ``settle_many`` runs it
           again up to that product, which starts the next batch;
        4. write their outcomes with their claims, and their source items' newest
           versions, one statement each (``capture_batches``), move the checkpoint past them, write
           the outbox rows of all of them, COMMIT. An error anywhere rolls all of it
           back: no result row, not even one only created, commits unsettled.
        Returns the checkpoint committed."""
        # Any error rolls the batch back and its products are settled one by one, so
        # a checked statement's error may surface at a later one (``late_errors``).
        with self._unit(run, (indices.start, indices.stop), late_errors=True) as uow:
            news = [_new(run, index) for index in indices]
            locks = items.lock_many(uow.tx, news)
            work = {
                index: self._item_work(run, new)
                for index, new, locked in zip(indices, news, locks, strict=True)
                if locked.workable
            }
            if work:
                uow.stream(run.job.tenant_id, run.binding.catalog_id)
                prefetch(uow, list(work.values()))
            reads = CatalogReads.of(uow)
            results = _Results()
            written: set[Read] = set()
            outcomes: list[str | None] = []
            for index in indices:
                if index not in work:
                    continue  # settled, failed, or a retry not due
                reads.begin()

                def check(w: ItemWork, plan: Plan | None, index: int = index) -> None:
                    if reads.taken & written:
                        raise _Cut(index)
                    wrote = written_by(w, plan) if plan is not None else set()
                    if wrote is None and index + 1 < indices.stop:
                        raise _Cut(index + 1)
                    written.update(wrote or ())

                settle = functools.partial(self._work, uow, run, work[index], check, results)
                outcomes.append(decided(run, index, settle))
            results.flush(uow.tx)
            commit_staged(uow)
        for outcome in outcomes:
            if outcome is not None:
                run.report.count(outcome)
        return indices.stop

    def _attempt(
        self, run: Run, new: NewResult, product: ExtractedProduct, move: tuple[int, int] | None
    ) -> str | None:
        """Settle one product in one transaction; returns its outcome (None: nothing
        was left to do).

        1. lock the result row (created if new); a settled or failed result, or a
           retry not yet due, skips to 7;
        2.-6. ``_work``;
        7. move the checkpoint (compare-and-set), write the outbox rows, COMMIT.
        A crash or error anywhere before COMMIT leaves nothing of it: no outcome, no
        decision, no event, no checkpoint move. Lock order is the result row, the
        cursor, then what the facts lock; every writer of a result keeps it.
        """
        with self._unit(run, move) as uow:
            locked = items.lock(uow.tx, new)
            if not locked.workable:
                uow.commit()  # settled, failed, or a retry not due: only the checkpoint moves
                return None
            outcome = self._work(uow, run, self._item_work(run, new), None)
            commit_staged(uow)
            return outcome

    def _item_work(self, run: Run, new: NewResult) -> ItemWork:
        job = run.job
        assert new.item_index is not None
        return ItemWork(
            key=new.key,
            tenant_id=job.tenant_id,
            catalog_id=run.binding.catalog_id,
            source=job.source,
            capture_id=job.capture_id,
            captured_at=job.captured_at,
            arrived_at=job.created_at,
            product=run.products[new.item_index],
        )

    def _work(
        self,
        uow: UnitOfWork,
        run: Run,
        work: ItemWork,
        check: Callable[[ItemWork, Plan | None], None] | None,
        batch: _Results | None = None,
    ) -> str:
        """Steps 2-6 of settling one product whose result row ``uow`` holds locked,
        written in ``uow`` without committing; returns the outcome.

        2. lock the stream's cursor (through the Unit of Work, before any exported
           state is read; the decision, if any, is written under it);
        3. newer work on the source item already applied: ``superseded``;
        4. resolve the product (identity in the pinned generation) into a plan;
           ``check`` it, before anything of it is written (a batch's guard);
        5. write its outcome with its claims and the source item's newest version (or,
           with ``batch``, keep them for the batch's own statements);
        6. stage the decision (``stage_decision``) or open the review case.
        """
        job = run.job
        uow.stream(job.tenant_id, work.catalog_id)
        product, key, tx = work.product, work.key, uow.tx
        reads = CatalogReads.of(uow)
        newest = reads.source_item(job.tenant_id, job.source, product.source_item_id)
        if newest is not None and _newer(newest, run):
            if check is not None:
                check(work, None)
            _Results.write(tx, batch, work, Settled(key, "superseded", item_id=newest.item_id))
            return "superseded"
        plan = self._resolve(uow, work)
        if check is not None:
            check(work, plan)
        settled = Settled(
            key,
            plan.outcome,
            item_id=plan.item_id,
            decision_id=plan.decision.decision_id if plan.decision else None,
            case_id=work.case_id if plan.case else None,
            error_code=plan.case.code if plan.case else None,
            error=sanitize(plan.case.reason) if plan.case else None,
        )
        version = _version(run, work, plan.item_id) if plan.item_id is not None else None
        _Results.write(tx, batch, work, settled, version)
        if plan.decision is not None:
            stage_decision(uow, plan.decision)
        elif plan.case is not None:
            open_case(
                uow,
                job.tenant_id,
                work.catalog_id,
                work.case_id,
                plan.case.subject_type,
                plan.case.subject_id,
            )
        return plan.outcome

    def _record_failure(
        self, run: Run, new: NewResult, move: tuple[int, int] | None, failure: Classified
    ) -> str | None:
        """Record a failed attempt in a transaction of its own.

        1. lock the result row (created again if the attempt's creation rolled back);
           if someone settled it meanwhile, skip to 3;
        2. a terminal failure makes it ``rejected``; a retryable one counts an attempt
           and schedules the next after a jittered backoff, or, the budget spent,
           makes it ``failed``;
        3. move the checkpoint past it and COMMIT: a durable retry record is enough
           for the checkpoint to pass. A crash before COMMIT leaves the checkpoint
           where it was, and the product is attempted again.
        """
        with self._unit(run, move) as uow:
            locked = items.lock(uow.tx, new)
            if not locked.workable:
                uow.commit()  # settled by someone else meanwhile
                return None
            if not failure.retryable:
                items.settle(
                    uow.tx, new.key, "rejected", error_code=failure.code, error=failure.message
                )
                outcome = "rejected"
            else:
                delay = self._item_retries.delay_after(locked.row.attempts + 1)
                items.record_failure(uow.tx, new.key, failure.code, failure.message, delay)
                outcome = "retryable" if delay is not None else "failed"
            uow.commit()
            return outcome


def _new(run: Run, index: int) -> NewResult:
    """The result product ``index`` of ``run`` starts as."""
    product = run.products[index]
    return run.new_result(index, product.source_item_id, product.fingerprint, product.locator)


def _version(run: Run, work: ItemWork, item_id: str) -> SourceItemVersion:
    """The source item's newest version, as this run's result of it would make it."""
    return SourceItemVersion(
        tenant_id=work.tenant_id,
        source=work.source,
        source_item_id=work.product.source_item_id,
        catalog_id=work.catalog_id,
        captured_at=work.captured_at,
        capture_created_at=work.arrived_at,
        capture_id=work.capture_id,
        parser_version=run.parser_version,
        schema_version=run.job.schema_version,
        fingerprint=work.product.fingerprint,
        item_id=item_id,
    )


def _newer(newest: SourceItemVersion, run: Run) -> bool:
    """Whether the applied result ``newest`` is newer than this run's would be."""
    j = run.job
    return (
        newest.captured_at,
        newest.capture_created_at,
        newest.capture_id.bytes,
        newest.parser_version,
    ) > (
        j.captured_at,
        j.created_at,
        j.capture_id.bytes,
        run.parser_version,
    )
