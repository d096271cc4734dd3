"""The tallies of a batch: what the applier did with each message and event, counted.

Inside the applier's transaction, each outcome is counted in its stream's
``progress.Counts`` (stored with the stream's progress); once a stream's progress
advances, its counts are summed into the batch's ``BatchResult``, which also counts
what has no stream to count in (messages received, quarantine entries opened,
deliveries kept aside).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from processors.applier.messages import Decoded
from processors.applier.plan import APPLIED, IGNORED_STALE, PARKED, Parked, Plan
from processors.applier.progress import Counts, Stream
from processors.applier.traced_outcomes import TracedOutcomes
from schemas.events import Envelope

# Each stream's outcomes in one transaction (a stream's counts start at its first).
StreamCounts = defaultdict[Stream, Counts]

Settled = tuple[float, float | None]
"""An event this batch settled (applied, or ignored as stale): when it occurred (the
writer's commit) and when Kafka took it (None: it did not come from Kafka in this
batch, as a released parked event), in seconds since the epoch, for the latency
histograms."""


@dataclass(slots=True)
class BatchResult:
    received: int = 0
    applied: int = 0
    duplicates: int = 0
    parked: int = 0
    released: int = 0
    ignored: int = 0
    quarantined: int = 0
    deferred: int = 0  # of paused catalogs: kept, handed back after the resume
    held: int = 0  # of an epoch not released yet: kept, handed back after its cutover
    progress: dict[Stream, int] = field(default_factory=dict)
    settled: list[Settled] = field(default_factory=list)
    traced: TracedOutcomes | None = None  # only with traced messages (``traced_outcomes``)

    def add(self, other: BatchResult) -> None:
        """Count ``other`` in: every counter summed, its progress taken over."""
        for name in _COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.progress.update(other.progress)
        self.settled.extend(other.settled)
        if other.traced:
            self.traced = {**(self.traced or {}), **other.traced}

    def add_stream(self, counts: Counts) -> None:
        """Count one stream's outcomes in (its progress is the caller's to set)."""
        self.applied += counts.applied
        self.duplicates += counts.duplicates
        self.parked += counts.parked
        self.released += counts.released
        self.ignored += counts.ignored


_COUNTERS = tuple(
    f.name for f in fields(BatchResult) if f.name not in ("progress", "settled", "traced")
)


def count_plan(
    counts: StreamCounts,
    plan: Plan,
    fresh: Mapping[uuid.UUID, Decoded],
    by_id: Mapping[uuid.UUID, Parked],
    settled: list[Settled] | None = None,
) -> list[Envelope]:
    """Count each outcome of ``plan`` in its event's stream: a new event's (of
    ``fresh``) as applied, ignored or parked; a released parked event's (of ``by_id``)
    as released, and applied or ignored. Every event applied or ignored goes to
    ``settled``. Returns the released events counted."""
    done = settled if settled is not None else []
    for event_id, outcome in plan.outcomes.items():
        d = fresh[event_id]
        c = counts[d.event.stream]
        if outcome == PARKED:
            c.parked += 1
            continue
        if outcome == APPLIED:
            c.applied += 1
        elif outcome == IGNORED_STALE:
            c.ignored += 1
        else:
            continue
        published = d.message.published_ms
        done.append(
            (d.event.occurred_at.timestamp(), None if published is None else published / 1000)
        )
    released_events: list[Envelope] = []
    for event_id, outcome in plan.released.items():
        event = by_id[event_id].event if event_id in by_id else None
        if event is None:
            continue
        released_events.append(event)
        done.append((event.occurred_at.timestamp(), None))
        c = counts[event.stream]
        c.released += 1
        if outcome == APPLIED:
            c.applied += 1
        else:
            c.ignored += 1
    return released_events
