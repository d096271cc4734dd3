"""The applier's transaction: a batch's decoded events judged, written and counted.

``apply_in_transaction`` runs inside a transaction its caller opens: the applier's
batch and an operator's retry of parked events commit it, the failure isolation's
diagnosis rolls it back. Its docstring numbers the steps; each step below is named
for the step it runs.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psycopg

from db.control.epochs import EpochSource
from processors.applier import inbox, parking, progress, rewound, skips
from processors.applier.messages import Decoded
from processors.applier.plan import (
    IGNORED_OLD_EPOCH,
    QUARANTINED,
    Parked,
    Plan,
    named_keys,
    plan_batch,
)
from processors.applier.quarantine import DEPENDENCY_SKIPPED, quarantine
from processors.applier.tallies import BatchResult, Settled, StreamCounts, count_plan
from processors.applier.traced_outcomes import note_judged
from processors.projections import registry
from schemas.codec import EventCodec
from schemas.events import Envelope, aggregate_key
from schemas.ids import AggregateKey

# Writes a generation's applied events to their projections (``registry.apply``).
ProjectionWrite = Callable[[psycopg.Connection, int, list[Envelope]], None]


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose rows a transaction works in, and what it reads with: the consumer, the
    generation it applies into if it is a rebuild's shadow (``progress.lock``), the
    control database's epochs and the event codec."""

    consumer: str
    shadow_generation: int | None
    epochs: EpochSource
    codec: EventCodec


def apply_in_transaction(
    conn: psycopg.Connection,
    scope: Scope,
    decoded: list[Decoded],
    current_epochs: dict[tuple[str, str], int],
    result: BatchResult,
    recheck: list[Parked] | None = None,
    write: ProjectionWrite | None = None,
) -> dict[uuid.UUID, str]:
    """The applier's transaction, in the order the code runs it:

    1. lock the progress rows of every stream in the batch;
    2. drop events the inbox already has, repeats within the batch, and events at
       or below the stream's durable progress (every such position already has
       its terminal outcome: a late copy is a duplicate, also once the inbox row
       it had was pruned or its event was skipped), except one whose position
       the inbox holds under another event id: the resolver's history went back
       (``rewound.reused``), and it is judged as new (``_new_events``);
    3. old-epoch events get the audited terminal outcome ``ignored_old_epoch``
       (``_ignore_old_epochs``); of the rest, a reused position flags its stream
       rewound, and every event of a flagged stream is quarantined
       ``STREAM_REWOUND`` (``rewound.hold``, ``_hold_rewound``);
    4. load applied revisions and the parked events the batch may release (``_load``);
    5. plan: applied / ignored_stale / parked, releasing parked dependants (a
       released one of an epoch no longer current is ``ignored_old_epoch``, never
       applied: ``_superseded``); an event that would park on a revision an
       operator skipped is quarantined instead (``DEPENDENCY_SKIPPED``,
       ``_set_aside_waiting_on_skipped``);
    6. write inbox outcomes (closing open quarantine entries of events that now
       have one: another copy of them got through) and parking (``_record_plan``),
       count the outcomes (``tallies.count_plan``), and write every projection
       (``projections.registry``, ``_write_projections``);
    7. advance each stream's contiguous progress (never backwards; ``_advance``).
    ``recheck``: stored parked events to consider first (an operator's retry).
    ``write``: how each generation's projection rows are written (``registry.apply``
    unless given; the failure isolation's diagnosis writes each event in a savepoint
    of its own and raises naming the first that fails).
    Returns the outcomes of the stored parked events released.
    COMMIT (by the caller's ``transaction()``) makes all of it durable together;
    a crash before it leaves nothing, and redelivery starts over. A crash after
    COMMIT and before the offsets are acknowledged redelivers events the inbox
    now knows, so they count as duplicates and change nothing.
    """
    recheck = recheck or []
    streams = {d.event.stream for d in decoded} | {p.event.stream for p in recheck}
    locked = progress.lock(conn, scope.consumer, streams, generation=scope.shadow_generation)
    counts: StreamCounts = defaultdict(progress.Counts)

    fresh, reused = _new_events(conn, scope.consumer, decoded, locked, counts)
    _ignore_old_epochs(conn, scope.consumer, fresh, current_epochs, counts)
    result.quarantined += _hold_rewound(conn, scope, fresh, reused, current_epochs, counts)

    events = [d.event for d in fresh.values()]
    loaded = _load(conn, scope, locked, events, recheck)
    superseded = _superseded(scope, current_epochs, recheck)
    plan = plan_batch(
        events, loaded.revisions, loaded.parked, loaded.load_more, recheck, superseded
    )
    _set_aside_waiting_on_skipped(conn, scope.consumer, plan, fresh, loaded.skipped, result)

    _record_plan(conn, scope.consumer, plan, fresh)
    settled: list[Settled] = []
    released_events = count_plan(counts, plan, fresh, loaded.by_id, settled)
    _write_projections(conn, plan.to_apply, loaded.generation, write)

    _advance(conn, scope, locked, released_events, counts, result)
    result.settled.extend(settled)
    note_judged(result.traced, decoded, plan.outcomes, current_epochs)
    return plan.released


def _new_events(
    conn: psycopg.Connection,
    consumer: str,
    decoded: list[Decoded],
    locked: dict[progress.Stream, progress.StreamProgress],
    counts: StreamCounts,
) -> tuple[dict[uuid.UUID, Decoded], dict[uuid.UUID, set[uuid.UUID]]]:
    """Step 2: the events to judge as new, by event id, every other one counted a
    duplicate; and the reused positions among them (``rewound.reused``)."""
    seen = inbox.known(conn, consumer, (d.event.event_id for d in decoded))
    fresh: dict[uuid.UUID, Decoded] = {}
    late: dict[uuid.UUID, Decoded] = {}  # at or below progress: duplicates, unless…
    for d in decoded:
        behind = locked.get(d.event.stream)
        if d.event.event_id in seen or d.event.event_id in fresh or d.event.event_id in late:
            counts[d.event.stream].duplicates += 1
        elif behind is not None and d.event.position <= behind.position:
            late[d.event.event_id] = d
        else:
            fresh[d.event.event_id] = d
    reused = rewound.reused(conn, consumer, (d.event for d in late.values()))
    for event_id, d in late.items():
        if event_id in reused:
            fresh[event_id] = d  # …its position is held under another event id
        else:
            counts[d.event.stream].duplicates += 1
    return fresh, reused


def _ignore_old_epochs(
    conn: psycopg.Connection,
    consumer: str,
    fresh: dict[uuid.UUID, Decoded],
    current_epochs: dict[tuple[str, str], int],
    counts: StreamCounts,
) -> None:
    """Step 3, old epochs: taken out of ``fresh``, recorded ``ignored_old_epoch``."""
    old = [
        d
        for d in fresh.values()
        if d.event.history_epoch < current_epochs[(d.event.tenant_id, d.event.catalog_id)]
    ]
    for d in old:
        del fresh[d.event.event_id]
        counts[d.event.stream].ignored += 1
    inbox.record(conn, ((d.event, IGNORED_OLD_EPOCH) for d in old), consumer)


def _hold_rewound(
    conn: psycopg.Connection,
    scope: Scope,
    fresh: dict[uuid.UUID, Decoded],
    reused: dict[uuid.UUID, set[uuid.UUID]],
    current_epochs: dict[tuple[str, str], int],
    counts: StreamCounts,
) -> int:
    """Step 3, rewound streams: their events taken out of ``fresh`` and quarantined
    (``rewound.hold``); returns the quarantine entries opened."""
    kept, opened = rewound.hold(
        conn,
        scope.consumer,
        scope.epochs,
        current_epochs,
        [(d.event, d.message) for d in fresh.values()],
        reused,
    )
    for event_id in kept | reused.keys():
        dropped = fresh.pop(event_id, None)
        if dropped is not None and event_id not in kept:  # a fence overtook the batch
            counts[dropped.event.stream].duplicates += 1
    return opened


@dataclass(frozen=True, slots=True)
class _Loaded:
    """Step 4's reads: what the plan starts from, and ``load_more`` for a cascade."""

    conn: psycopg.Connection
    scope: Scope
    generation: dict[tuple[str, str], int]  # the one each catalog's events go to
    nothing_parked: set[tuple[str, str]]
    skipped: set[tuple[str, str]]  # catalogs with revisions an operator skipped
    parked: list[Parked]
    revisions: dict[AggregateKey, int]
    by_id: dict[uuid.UUID, Parked]  # every parked event the plan may release

    def load_more(self, keys: list[AggregateKey]) -> tuple[list[Parked], dict[AggregateKey, int]]:
        """The parked events a cascade releases next may be, and the revisions they name."""
        found = _waiting_on(self.conn, self.scope, self.nothing_parked, keys)
        self.by_id.update((p.event.event_id, p) for p in found)
        return found, _revisions(self.conn, parking.keys_named(found), self.generation)


def _load(
    conn: psycopg.Connection,
    scope: Scope,
    locked: dict[progress.Stream, progress.StreamProgress],
    events: list[Envelope],
    recheck: list[Parked],
) -> _Loaded:
    """Step 4: the parked events waiting on what ``events`` change, and the applied
    revisions of everything the events and those parked ones name."""
    # Parked events wait only on aggregates of their own tenant and catalog. Where
    # nothing is parked, no aggregate has anything waiting and the lookups are
    # skipped; the progress locks keep this batch's streams from parking meanwhile.
    catalogs = {(e.tenant_id, e.catalog_id) for e in events}
    catalogs |= {(p.event.tenant_id, p.event.catalog_id) for p in recheck}
    flags = parking.catalogs_waiting(conn, scope.consumer, catalogs)
    nothing_parked = catalogs - flags.parked
    # The generation each catalog's events go to: the one this consumer's progress
    # rows of the catalog point at (a cutover moves them all together).
    generation = progress.generations(conn, scope.consumer, locked, catalogs)

    parked = _waiting_on(conn, scope, nothing_parked, {aggregate_key(e) for e in events})
    keys = {k for e in events for k in named_keys(e)}
    keys |= parking.keys_named(parked) | parking.keys_named(recheck)
    revisions = _revisions(conn, keys, generation)

    # Every parked event the plan may release, including those a cascade loads.
    by_id = {p.event.event_id: p for p in parked}
    by_id.update((p.event.event_id, p) for p in recheck)
    return _Loaded(conn, scope, generation, nothing_parked, flags.skipped, parked, revisions, by_id)


def _waiting_on(
    conn: psycopg.Connection,
    scope: Scope,
    nothing_parked: set[tuple[str, str]],
    keys: Iterable[AggregateKey],
) -> list[Parked]:
    return parking.waiting_on(
        conn,
        scope.consumer,
        (k for k in keys if (k[0], k[1]) not in nothing_parked),
        scope.codec,
    )


def _superseded(
    scope: Scope, current_epochs: dict[tuple[str, str], int], recheck: list[Parked]
) -> Callable[[Envelope], bool]:
    """Step 5: whether an event's history epoch is no longer current."""
    # A parked event of an epoch that is no longer current is never applied,
    # whatever releases it; operator retries name catalogs the batch may not.
    epochs = dict(current_epochs)
    unseen = {(p.event.tenant_id, p.event.catalog_id) for p in recheck} - epochs.keys()
    if unseen:
        epochs.update(scope.epochs.epochs(unseen))

    def superseded(event: Envelope) -> bool:
        current = epochs.get((event.tenant_id, event.catalog_id))
        return current is not None and event.history_epoch < current

    return superseded


def _set_aside_waiting_on_skipped(
    conn: psycopg.Connection,
    consumer: str,
    plan: Plan,
    fresh: dict[uuid.UUID, Decoded],
    skipped_catalogs: set[tuple[str, str]],
    result: BatchResult,
) -> None:
    """Step 5: quarantine, instead of parking, each new event that misses a revision an
    operator skipped (it would wait for ever); its inbox outcome is
    ``quarantined``. Looks only where the catalog has skipped revisions."""
    candidates = [
        (e, missing)
        for e, missing in plan.to_park
        if (e.tenant_id, e.catalog_id) in skipped_catalogs
    ]
    if not candidates:
        return
    skipped = skips.skipped_revisions(
        conn, consumer, (aggregate_key(e, d) for e, missing in candidates for d in missing)
    )
    dead: set[uuid.UUID] = set()
    for event, missing in candidates:
        for dep in missing:
            found = skipped.get(aggregate_key(event, dep))
            if found is not None and found[0] >= dep.revision:
                detail = skips.waits_on_skipped(dep.type, dep.id, dep.revision, found[1])
                message = fresh[event.event_id].message
                result.quarantined += quarantine(
                    conn, consumer, message, DEPENDENCY_SKIPPED, detail, event
                )
                dead.add(event.event_id)
                break
    if dead:
        plan.to_park = [(e, m) for e, m in plan.to_park if e.event_id not in dead]
        for event_id in dead:
            plan.outcomes[event_id] = QUARANTINED


def _record_plan(
    conn: psycopg.Connection, consumer: str, plan: Plan, fresh: dict[uuid.UUID, Decoded]
) -> None:
    """Step 6: the inbox outcomes of the new events and of the released parked ones,
    the new events left parked, the released ones unparked."""
    inbox.record(
        conn,
        ((fresh[i].event, outcome) for i, outcome in plan.outcomes.items()),
        consumer,
        supersede=True,
    )
    inbox.set_outcomes(conn, consumer, plan.released)
    parking.park(conn, consumer, [(e, fresh[e.event_id].message, m) for e, m in plan.to_park])
    parking.unpark(conn, consumer, plan.released)


def _write_projections(
    conn: psycopg.Connection,
    to_apply: list[Envelope],
    generation: dict[tuple[str, str], int],
    write: ProjectionWrite | None,
) -> None:
    """Step 6: the applied events written to the projections of their generation."""
    for gen, events_of_gen in _by_generation(to_apply, generation).items():
        if write is None:
            registry.apply(conn, gen, events_of_gen)
        else:
            write(conn, gen, events_of_gen)


def _advance(
    conn: psycopg.Connection,
    scope: Scope,
    locked: dict[progress.Stream, progress.StreamProgress],
    released_events: list[Envelope],
    counts: StreamCounts,
    result: BatchResult,
) -> None:
    """Step 7: lock the streams of released events not locked yet, then advance each
    locked stream's progress with its counts (one statement for all of them,
    ``progress.advance_all``), and count those in ``result``."""
    extra = {e.stream for e in released_events} - locked.keys()
    if extra:
        locked.update(
            progress.lock(conn, scope.consumer, extra, generation=scope.shadow_generation)
        )
    moves = {stream: (state.position, counts[stream]) for stream, state in locked.items()}
    ends = progress.advance_all(conn, scope.consumer, moves)
    for stream, (_, c) in moves.items():
        result.add_stream(c)
        result.progress[stream] = ends[stream]


def _revisions(
    conn: psycopg.Connection,
    keys: set[AggregateKey],
    generation: dict[tuple[str, str], int],
) -> dict[AggregateKey, int]:
    """The applied revision of each key, read in the generation its catalog's
    events go to for this consumer (never another consumer's generation)."""
    by_gen: dict[int, list[AggregateKey]] = defaultdict(list)
    for key in keys:
        by_gen[generation.get((key[0], key[1]), 1)].append(key)
    found: dict[AggregateKey, int] = {}
    for gen, of_gen in by_gen.items():
        found.update(registry.load_revisions(conn, gen, of_gen))
    return found


def _by_generation(
    events: list[Envelope], generation: dict[tuple[str, str], int]
) -> dict[int, list[Envelope]]:
    grouped: dict[int, list[Envelope]] = defaultdict(list)
    for event in events:
        grouped[generation[(event.tenant_id, event.catalog_id)]].append(event)
    return grouped
