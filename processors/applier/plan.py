"""Deciding each event's outcome in a batch: the applier's domain logic, no I/O.

Given the events new to the inbox, the revisions the projection already has and the
parked events that might be released, ``plan_batch`` decides per event: applied,
ignored as stale, or parked on a dependency. It releases parked events as soon as
what they wait for is applied, in the same batch, so a dependency and its dependants
commit together. The caller turns the plan into SQL in one transaction.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from schemas.events import AggregateRef, Envelope, aggregate_key
from schemas.ids import AggregateKey

APPLIED = "applied"
IGNORED_STALE = "ignored_stale"
IGNORED_OLD_EPOCH = "ignored_old_epoch"
PARKED = "parked"
# Set aside in quarantine by the applier itself (it waits on a skipped revision, or its
# release failed): not terminal, and a redelivered copy is a duplicate.
QUARANTINED = "quarantined"


def named_keys(event: Envelope) -> list[AggregateKey]:
    """The aggregate an event changes and every aggregate it depends on."""
    return [aggregate_key(event)] + [aggregate_key(event, d) for d in event.dependencies]


@dataclass(frozen=True, slots=True)
class Parked:
    """A parked event as stored: the envelope and its encoded message."""

    event: Envelope
    value: bytes


@dataclass(slots=True)
class Plan:
    """What one batch does.

    ``outcomes``: new events → applied / ignored_stale / parked.
    ``released``: stored parked events → applied / ignored_stale.
    ``to_apply``: events to fold into the projection, in application order.
    ``to_park``: new events left parked, with the dependencies they still miss.
    """

    outcomes: dict[uuid.UUID, str] = field(default_factory=dict)
    released: dict[uuid.UUID, str] = field(default_factory=dict)
    to_apply: list[Envelope] = field(default_factory=list)
    to_park: list[tuple[Envelope, tuple[AggregateRef, ...]]] = field(default_factory=list)


# Loads the stored parked events waiting on any of the given aggregates, and the
# applied revisions of every aggregate those events name.
ParkedLoader = Callable[[list[AggregateKey]], tuple[list[Parked], dict[AggregateKey, int]]]


def plan_batch(
    new_events: Iterable[Envelope],
    revisions: dict[AggregateKey, int],
    parked: Iterable[Parked],
    load_parked: ParkedLoader,
    recheck: Iterable[Parked] = (),
    superseded_epoch: Callable[[Envelope], bool] = lambda _event: False,
) -> Plan:
    """Decide outcomes for ``new_events`` (already deduplicated against the inbox).

    ``revisions`` must hold the applied revision of every aggregate named by the new
    events and by ``parked`` (absent = never applied); it is updated in place.
    ``parked`` are the stored parked events waiting on any aggregate the new events
    change; ``load_parked`` fetches more when a release cascades further. New events
    are considered in stream position order; applying an aggregate re-examines
    everything that waits on it. ``recheck`` are stored parked events an operator asked
    to look at again: each is considered first, as if it had just arrived, and stays
    parked (absent from the plan) if it still misses a dependency.
    ``superseded_epoch`` says which events belong to a history epoch that is no longer
    current: a stored parked one of those is never applied, whatever releases it (a
    new epoch's event can name the same aggregate and revision); it gets the audited
    terminal outcome ``ignored_old_epoch`` instead.
    """
    events = sorted(new_events, key=lambda e: (e.stream, e.position))
    plan = Plan()
    waiting: dict[AggregateKey, list[tuple[Envelope, bool]]] = defaultdict(list)
    loaded_for: set[AggregateKey] = {aggregate_key(e) for e in events}
    decided: set[uuid.UUID] = set()
    parked_here: dict[uuid.UUID, Envelope] = {}
    applied_keys: list[AggregateKey] = []

    def unmet(event: Envelope) -> tuple[AggregateRef, ...]:
        return tuple(
            dep
            for dep in event.dependencies
            if revisions.get(aggregate_key(event, dep), 0) < dep.revision
        )

    def decide(event: Envelope, from_store: bool, outcome: str) -> None:
        (plan.released if from_store else plan.outcomes)[event.event_id] = outcome
        decided.add(event.event_id)
        parked_here.pop(event.event_id, None)

    def consider(event: Envelope, from_store: bool) -> None:
        if event.event_id in decided:
            return
        if from_store and superseded_epoch(event):
            decide(event, from_store, IGNORED_OLD_EPOCH)
            return
        key = aggregate_key(event)
        if event.aggregate.revision <= revisions.get(key, 0):
            decide(event, from_store, IGNORED_STALE)
            return
        missing = unmet(event)
        if missing:
            if not from_store:
                parked_here[event.event_id] = event
            for dep in missing:
                waiting[aggregate_key(event, dep)].append((event, from_store))
            return
        revisions[key] = event.aggregate.revision
        plan.to_apply.append(event)
        decide(event, from_store, APPLIED)
        applied_keys.append(key)

    def release() -> None:
        while applied_keys:
            key = applied_keys.pop(0)
            if key not in loaded_for:
                loaded_for.add(key)
                more, more_revisions = load_parked([key])
                for k, rev in more_revisions.items():
                    revisions.setdefault(k, rev)
                for p in more:
                    if p.event.event_id not in decided:
                        for dep in unmet(p.event) or p.event.dependencies:
                            waiting[aggregate_key(p.event, dep)].append((p.event, True))
            for event, from_store in waiting.pop(key, []):
                consider(event, from_store)

    for p in parked:
        for dep in unmet(p.event) or p.event.dependencies:
            waiting[aggregate_key(p.event, dep)].append((p.event, True))
    for p in recheck:
        consider(p.event, from_store=True)
        release()
    for event in events:
        consider(event, from_store=False)
        release()

    for event_id, event in parked_here.items():
        plan.outcomes[event_id] = PARKED
        plan.to_park.append((event, unmet(event)))
    return plan
