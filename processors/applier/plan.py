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
    planning = _Planning(revisions, load_parked, superseded_epoch)
    planning.loaded_for.update(aggregate_key(e) for e in events)
    for p in parked:
        planning.wait(p.event)
    for p in recheck:
        planning.consider(p.event, from_store=True)
        planning.release()
    for event in events:
        planning.consider(event, from_store=False)
        planning.release()
    return planning.finish()


@dataclass(slots=True)
class _Planning:
    """One ``plan_batch`` under way: the plan so far, and what waits on what."""

    revisions: dict[AggregateKey, int]
    load_parked: ParkedLoader
    superseded_epoch: Callable[[Envelope], bool]
    plan: Plan = field(default_factory=Plan)
    # Each aggregate's waiting events, and whether each is a stored parked one.
    waiting: defaultdict[AggregateKey, list[tuple[Envelope, bool]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    loaded_for: set[AggregateKey] = field(default_factory=set)  # parked events loaded
    decided: set[uuid.UUID] = field(default_factory=set)
    parked_here: dict[uuid.UUID, Envelope] = field(default_factory=dict)  # new ones
    applied_keys: list[AggregateKey] = field(default_factory=list)  # to release on

    def unmet(self, event: Envelope) -> tuple[AggregateRef, ...]:
        return tuple(
            dep
            for dep in event.dependencies
            if self.revisions.get(aggregate_key(event, dep), 0) < dep.revision
        )

    def wait(self, stored: Envelope) -> None:
        """A stored parked event waits on what it misses (or all it names)."""
        for dep in self.unmet(stored) or stored.dependencies:
            self.waiting[aggregate_key(stored, dep)].append((stored, True))

    def decide(self, event: Envelope, from_store: bool, outcome: str) -> None:
        (self.plan.released if from_store else self.plan.outcomes)[event.event_id] = outcome
        self.decided.add(event.event_id)
        self.parked_here.pop(event.event_id, None)

    def consider(self, event: Envelope, from_store: bool) -> None:
        if event.event_id in self.decided:
            return
        if from_store and self.superseded_epoch(event):
            self.decide(event, from_store, IGNORED_OLD_EPOCH)
            return
        key = aggregate_key(event)
        if event.aggregate.revision <= self.revisions.get(key, 0):
            self.decide(event, from_store, IGNORED_STALE)
            return
        missing = self.unmet(event)
        if missing:
            if not from_store:
                self.parked_here[event.event_id] = event
            for dep in missing:
                self.waiting[aggregate_key(event, dep)].append((event, from_store))
            return
        self.revisions[key] = event.aggregate.revision
        self.plan.to_apply.append(event)
        self.decide(event, from_store, APPLIED)
        self.applied_keys.append(key)

    def release(self) -> None:
        """Consider again what waits on each aggregate applied, loading the stored
        parked events that wait on it the first time."""
        while self.applied_keys:
            key = self.applied_keys.pop(0)
            if key not in self.loaded_for:
                self.loaded_for.add(key)
                more, more_revisions = self.load_parked([key])
                for k, rev in more_revisions.items():
                    self.revisions.setdefault(k, rev)
                for p in more:
                    if p.event.event_id not in self.decided:
                        self.wait(p.event)
            for event, from_store in self.waiting.pop(key, []):
                self.consider(event, from_store)

    def finish(self) -> Plan:
        """The plan, with the new events left waiting parked."""
        for event_id, event in self.parked_here.items():
            self.plan.outcomes[event_id] = PARKED
            self.plan.to_park.append((event, self.unmet(event)))
        return self.plan
