"""Settling a run's products: each product gets its outcome in one transaction that
also moves the job's checkpoint past it (compare-and-set), so the two always commit
together; a failed attempt is rolled back and recorded in a transaction of its own.
``Settler.settle`` is step 5 of ``CaptureWorker.run``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.control.pauses import PauseWatch
from db.exceptions import HistoryRewound, StreamPaused
from db.repositories import capture_items as items
from db.repositories.capture_items import NewResult, SourceItemVersion
from db.resolver.commit_notifier import CommitNotifier
from db.unit_of_work import Transaction, UnitOfWork
from producers.capture.adapters import ExtractedProduct
from producers.capture.worker import checkpoints
from producers.capture.worker.checkpoints import CheckpointLost
from producers.capture.worker.outcomes import Classified, RunAborted, classify, sanitize
from producers.capture.worker.resolution import ItemWork, Resolve
from producers.capture.worker.retries import RetryPolicy
from producers.capture.worker.runs import Run
from producers.capture.worker.spans import decided
from producers.resolver.decisions import record_decision
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
    """A Unit of Work whose commit first moves the job's checkpoint (when given a
    move), so a product's outcome and the checkpoint past it commit together."""

    def __init__(
        self,
        pool: ConnectionPool,
        epochs: EpochSource,
        codec: EventCodec,
        move: Callable[[Transaction], None] | None,
        pauses: PauseWatch | None = None,
        notifier: CommitNotifier | None = None,
    ) -> None:
        super().__init__(pool, epochs, codec, pauses, notifier)
        self._move = move

    def commit(self) -> list[Envelope]:
        if self._move is not None:
            self._move(self.tx)
        return super().commit()


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

    def _unit(self, run: Run, move: tuple[int, int] | None) -> _ItemUnit:
        def advance(tx: Transaction) -> None:
            assert move is not None
            checkpoints.advance(tx, run.ref, *move)

        return _ItemUnit(
            self._uow_pool,
            self._epochs,
            self._codec,
            advance if move else None,
            self._pauses,
            self._notifier,
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
        new = run.new_result(index, product.source_item_id, product.fingerprint, product.locator)
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

    def _attempt(
        self, run: Run, new: NewResult, product: ExtractedProduct, move: tuple[int, int] | None
    ) -> str | None:
        """Settle one product in one transaction; returns its outcome (None: nothing
        was left to do).

        1. lock the result row (created if new); a settled or failed result, or a
           retry not yet due, skips to 7;
        2. lock the stream's cursor (through the Unit of Work, before any exported
           state is read; the decision, if any, is written under it);
        3. newer work on the source item already applied: ``superseded``, skip to 7;
        4. resolve the product (identity in the pinned generation) into a plan;
        5. write its claims, its outcome and the source item's newest version;
        6. record the decision (``record_decision``) or open the review case;
        7. move the checkpoint (compare-and-set), write the outbox rows, COMMIT.
        A crash or error anywhere before COMMIT leaves nothing of it: no outcome, no
        decision, no event, no checkpoint move. Lock order is the result row, the
        cursor, then what the facts lock; every writer of a result keeps it.
        """
        job = run.job
        with self._unit(run, move) as uow:
            locked = items.lock(uow.tx, new)
            if not locked.workable:
                uow.commit()  # settled, failed, or a retry not due: only the checkpoint moves
                return None
            uow.stream(job.tenant_id, run.binding.catalog_id)
            work = ItemWork(
                key=new.key,
                tenant_id=job.tenant_id,
                catalog_id=run.binding.catalog_id,
                source=job.source,
                capture_id=job.capture_id,
                captured_at=job.captured_at,
                arrived_at=job.created_at,
                product=product,
            )
            tx = uow.tx
            newest = items.source_item(tx, job.tenant_id, job.source, product.source_item_id)
            if newest is not None and _newer(newest, run):
                items.save_claims(tx, new.key, claims_of(product))
                items.settle(tx, new.key, "superseded", item_id=newest.item_id)
                uow.commit()
                return "superseded"
            plan = self._resolve(uow, work)
            items.save_claims(tx, new.key, claims_of(product))
            items.settle(
                tx,
                new.key,
                plan.outcome,
                item_id=plan.item_id,
                decision_id=plan.decision.decision_id if plan.decision else None,
                case_id=work.case_id if plan.case else None,
                error_code=plan.case.code if plan.case else None,
                error=sanitize(plan.case.reason) if plan.case else None,
            )
            # Under the cursor lock this always succeeds; the compare-and-set is the guard.
            if plan.item_id is not None and not items.advance_source_item(
                tx, _version(run, work, plan.item_id)
            ):
                raise RuntimeError("newer work on the source item was applied meanwhile")
            if plan.decision is not None:
                record_decision(uow, plan.decision)
            else:
                if plan.case is not None:
                    open_case(
                        uow,
                        job.tenant_id,
                        run.binding.catalog_id,
                        work.case_id,
                        plan.case.subject_type,
                        plan.case.subject_id,
                    )
                uow.commit()
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
