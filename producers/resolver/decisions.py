"""The one write path of accepted changes (AW-01): a decision and the facts it accepts.

Every accepted change, by a reviewer or an automatic rule, is a ``Decision``: who
decided what and why, on which evidence, against which review-case revision, and the
facts it accepts. ``record_decision`` runs it as one transaction of the Unit of Work.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg.errors

from db.repositories import decisions as decision_rows
from db.repositories import review_cases as cases
from db.repositories.decisions import Effect
from db.resolver import evidence as evidence_rows
from db.stream_writer import PendingEvent
from db.unit_of_work import Transaction, UnitOfWork
from producers.resolver.exceptions import (
    CaseNotFound,
    EvidenceExpired,
    EvidenceRequired,
    InvalidDecision,
    PriorDecisionNotFound,
    StaleRevision,
    commit_violation,
)
from producers.resolver.facts import DecisionScope, Fact, accept_run, fact_runs
from producers.resolver.review_cases import CaseRevision
from schemas.events import AggregateRef, DecisionRecorded, Envelope, EvidenceRef

AGGREGATE = "decision"
ACTOR_KINDS = ("human", "rule")
CHANGED, RELIED_ON = "changed", "relied_on"


@dataclass(frozen=True, slots=True)
class Decision:
    """A decision to record; validated on construction (pure, no I/O).

    ``case`` is None for an automatic rule acting outside any review case.
    ``prior_decision_ids`` name the earlier decisions this one rests on or corrects.
    """

    tenant_id: str
    catalog_id: str
    action: str
    actor: str
    rationale: str
    evidence: tuple[EvidenceRef, ...]
    facts: tuple[Fact, ...] = ()
    actor_kind: str = "human"
    case: CaseRevision | None = None
    prior_decision_ids: tuple[uuid.UUID, ...] = ()
    decision_id: uuid.UUID = field(default_factory=uuid.uuid4)

    def __post_init__(self) -> None:
        if not self.evidence:
            raise EvidenceRequired(
                f"decision {self.action!r} by {self.actor!r} cites no evidence (capture + locator)"
            )
        if any(not e.capture_id or not e.locator for e in self.evidence):
            raise EvidenceRequired("every evidence reference needs a capture id and a locator")
        if not self.action or not self.actor:
            raise InvalidDecision("a decision needs an action and an actor")
        if self.actor_kind not in ACTOR_KINDS:
            raise InvalidDecision(f"actor kind {self.actor_kind!r} is not one of {ACTOR_KINDS}")
        if self.decision_id in self.prior_decision_ids:
            raise InvalidDecision("a decision cannot name itself as a prior decision")


@dataclass(frozen=True, slots=True)
class Recorded:
    """What a recorded decision changed: the new case revision and every aggregate
    revision it produced an event for, in event order."""

    decision_id: uuid.UUID
    case_revision: int | None
    aggregates: tuple[AggregateRef, ...]


def effects(events: Sequence[PendingEvent]) -> list[Effect]:
    """What a decision's events say it did (pure).

    One 'changed' effect per event's aggregate revision, in event order; then one
    'relied_on' effect per dependency the decision did not itself change, each once.
    """
    changed = [
        Effect(CHANGED, e.aggregate.type, e.aggregate.id, e.aggregate.revision) for e in events
    ]
    produced = {(c.aggregate_type, c.aggregate_id, c.revision) for c in changed}
    relied: dict[tuple[str, str, int], Effect] = {}
    for event in events:
        for dep in event.dependencies:
            key = (dep.type, dep.id, dep.revision)
            if key not in produced:
                relied.setdefault(key, Effect(RELIED_ON, *key))
    return [*changed, *relied.values()]


def _capture_ids(evidence: Sequence[EvidenceRef]) -> list[uuid.UUID]:
    """The cited capture ids that can name a stored capture (intake's are uuids; a
    reference may name evidence held elsewhere)."""
    return sorted({i for ref in evidence if (i := _capture_uuid(ref.capture_id)) is not None})


@functools.lru_cache(maxsize=1024)
def _capture_uuid(capture_id: str) -> uuid.UUID | None:
    """A cited capture id as a uuid, or None (kept: a capture's products cite it alike)."""
    try:
        return uuid.UUID(capture_id)
    except ValueError:
        return None


def record_decision(uow: UnitOfWork, decision: Decision) -> Recorded:
    """Record ``decision`` and accept its facts, all or nothing; then commit.

    1. lock the stream's cursor (before reading or changing any exported state);
    2. move the review case from the expected revision to the next, or fail with
       ``StaleRevision`` (INV-04) — the zero-row UPDATE changes nothing;
    3. share-lock the cited captures (evidence retention waits for this transaction,
       then sees the decision; one it deleted meanwhile refuses the decision,
       ``EVIDENCE_EXPIRED``), check the prior decisions exist and insert the
       immutable decision row (INV-05);
    4. apply each fact with ``revision + 1`` and its invariant checks (INV-01, INV-03,
       INV-07, INV-08), each naming the decision; consecutive independent facts of a
       set-based type (items, retirements, listing mappings, attribute values)
       together, one statement per step (``fact_runs``), with the same outcome as one
       by one;
    5. queue one event per affected aggregate revision with its dependencies: the
       decision's first, then the facts' in the order they were applied;
    6. record the decision's effects: every aggregate revision those events change
       and every other one they depend on (``effects``);
    7. the Unit of Work writes the outbox rows at the next positions and COMMITs;
       PostgreSQL runs its deferred constraint checks (INV-07) here, and a violation
       is raised as the domain error the fact's own check would have raised.
    A domain error or crash anywhere before step 7 completes rolls everything back:
    no case revision, decision, fact, effect, outbox row or position is consumed.

    The Unit of Work first tries it without holding the cursor lock while it reads
    (``UnitOfWork.unlocked_first``): steps 1-6 read, step 7 writes everything in one
    statement that moves the cursor only from the position read in step 1 and
    advances the case only from the expected revision. Should anything have changed
    meanwhile, that statement writes nothing and the decision is recorded again,
    steps 1-7, under the lock, with the outcome described above.
    """
    d = decision

    def attempt() -> tuple[int | None, list[Envelope]]:
        case_revision = stage_decision(uow, d)  # 1.-6.
        return case_revision, commit_staged(uow)  # 7.

    case_revision, envelopes = uow.unlocked_first(attempt)
    return Recorded(d.decision_id, case_revision, tuple(e.aggregate for e in envelopes))


def commit_staged(uow: UnitOfWork) -> list[Envelope]:
    """Commit ``uow`` (step 7 of ``record_decision``): a deferred constraint's
    violation is raised as the domain error the fact's own check would have raised."""
    try:
        return uow.commit()
    except psycopg.errors.IntegrityError as exc:
        error = commit_violation(exc)
        if error is None:
            raise
        raise error from exc


def stage_decision(uow: UnitOfWork, decision: Decision) -> int | None:
    """Steps 1-6 of ``record_decision`` without its COMMIT: the decision and its facts
    written in ``uow``, their events queued after any queued before them; returns the
    case's new revision (None: no case). The caller commits ``uow`` (several decisions
    of one stream may share one transaction: the capture worker's settling) or lets
    it roll back; until then nothing of the decision is visible."""
    d = decision
    writer = uow.stream(d.tenant_id, d.catalog_id)  # 1. the cursor lock
    tx = uow.tx
    case_revision = _advance_case(tx, d)  # 2.
    _insert_decision(uow, d)  # 3.
    before = len(writer.pending)
    writer.append(_recorded_event(d))  # 5. the decision's event, first

    # 4. (and 5.) each run of facts, queuing its events as it is applied
    scope = DecisionScope(d.tenant_id, d.catalog_id, d.decision_id)
    for run in fact_runs(d.facts):
        accept_run(uow, scope, run)

    # 6. this decision's events only (a shared transaction may hold others before)
    decision_rows.insert_effects(
        tx, d.tenant_id, d.catalog_id, d.decision_id, effects(writer.pending[before:])
    )
    return case_revision


def _advance_case(tx: Transaction, d: Decision) -> int | None:
    """Step 2 of ``record_decision``: the review case's new revision (None: no case),
    or ``CaseNotFound`` / ``StaleRevision`` (INV-04) when the UPDATE matched no row."""
    if d.case is None:
        return None
    case_revision = cases.advance(
        tx, d.tenant_id, d.catalog_id, d.case.case_id, d.case.expected_revision, "decided"
    )
    if case_revision is None:
        current = cases.get(tx, d.tenant_id, d.catalog_id, d.case.case_id)
        if current is None:
            raise CaseNotFound(f"no case {d.case.case_id!r} in {d.tenant_id}/{d.catalog_id}")
        raise StaleRevision(
            f"case {d.case.case_id!r} is at revision {current.revision}, "
            f"the decision was made against {d.case.expected_revision}"
        )
    return case_revision


def _insert_decision(uow: UnitOfWork, d: Decision) -> None:
    """Step 3 of ``record_decision``: hold the cited captures, check the prior
    decisions exist, insert the immutable decision row (INV-05)."""
    tx = uow.tx
    # The captures cited stay until this commits: evidence retention waits for it.
    # A capture already held in this transaction (an earlier decision sharing it)
    # stays held: only the others are locked.
    cited = [c for c in _capture_ids(d.evidence) if (d.tenant_id, c) not in uow.held_captures]
    gone = evidence_rows.hold_cited(tx, d.tenant_id, cited)
    uow.held_captures.update((d.tenant_id, c) for c in cited if c not in gone)
    if gone:
        raise EvidenceExpired(
            f"captures {sorted(map(str, gone))} were deleted by evidence retention just now;"
            " cite captures that are kept"
        )
    unknown = decision_rows.missing(tx, d.tenant_id, d.catalog_id, d.prior_decision_ids)
    if unknown:
        raise PriorDecisionNotFound(f"no prior decisions {sorted(map(str, unknown))}")
    decision_rows.insert(
        tx,
        d.tenant_id,
        d.catalog_id,
        d.decision_id,
        action=d.action,
        actor=d.actor,
        actor_kind=d.actor_kind,
        rationale=d.rationale,
        evidence=[{"capture_id": e.capture_id, "locator": e.locator} for e in d.evidence],
        case_id=d.case.case_id if d.case else None,
        case_revision=d.case.expected_revision if d.case else None,
        prior_decision_ids=d.prior_decision_ids,
    )


def _recorded_event(d: Decision) -> PendingEvent:
    """The decision's own event (``DecisionRecorded``), revision 1 of its aggregate."""
    return PendingEvent(
        aggregate=AggregateRef(type=AGGREGATE, id=str(d.decision_id), revision=1),
        payload=DecisionRecorded(
            action=d.action,
            actor=d.actor,
            actor_kind=d.actor_kind,
            rationale=d.rationale,
            evidence=d.evidence,
            prior_decision_ids=d.prior_decision_ids,
            case_id=d.case.case_id if d.case else None,
            case_revision=d.case.expected_revision if d.case else None,
        ),
    )
