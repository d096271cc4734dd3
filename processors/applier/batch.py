"""Applying a batch of messages in one product transaction."""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields

import psycopg

from db.control.epochs import EpochSource
from db.control.pauses import PauseWatch
from processors.applier import deferred, inbox, offsets, parking, progress, rewound, skips
from processors.applier.exceptions import EpochUnknown
from processors.applier.messages import RawMessage
from processors.applier.plan import (
    APPLIED,
    IGNORED_OLD_EPOCH,
    IGNORED_STALE,
    PARKED,
    QUARANTINED,
    Parked,
    Plan,
    named_keys,
    plan_batch,
)
from processors.applier.quarantine import (
    DEPENDENCY_SKIPPED,
    SetAside,
    keep_skipped,
    quarantine,
    set_aside,
    skipped_copy,
)
from processors.projections import registry
from schemas.codec import EventCodec
from schemas.events import Envelope, aggregate_key
from schemas.exceptions import CodecError, Truncated
from schemas.ids import AggregateKey
from schemas.logs import event_fields

log = logging.getLogger(__name__)

DEFAULT_CONSUMER = "product-applier"


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
    progress: dict[progress.Stream, int] = field(default_factory=dict)

    def add(self, other: BatchResult) -> None:
        """Count ``other`` in: every counter summed, its progress taken over."""
        for name in _COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.progress.update(other.progress)


_COUNTERS = tuple(f.name for f in fields(BatchResult) if f.name != "progress")


@dataclass(frozen=True, slots=True)
class _Decoded:
    message: RawMessage
    event: Envelope


class _Failure(Exception):
    """One event's projection write failed while a batch was being diagnosed."""

    def __init__(self, event: Envelope, error: psycopg.Error) -> None:
        super().__init__(str(error))
        self.event = event
        self.error = error


class _RollBack(Exception):
    """Ends a diagnosing transaction that must leave nothing behind."""


def _apply_failed_code(exc: psycopg.Error) -> str:
    return f"APPLY_FAILED_{exc.sqlstate}" if exc.sqlstate else "APPLY_FAILED"


class Applier:
    """Applies batches of raw messages; owns one product-database connection."""

    def __init__(
        self,
        product_dsn: str,
        epochs: EpochSource,
        codec: EventCodec,
        consumer: str = DEFAULT_CONSUMER,
        pauses: PauseWatch | None = None,
        shadow_generation: int | None = None,
    ) -> None:
        self.consumer = consumer
        # A rebuild's shadow applies into its rebuild's generation only, and never
        # creates a progress row of its own (``progress.lock``).
        self.shadow_generation = shadow_generation
        self._pauses = pauses
        self._dsn = product_dsn
        self._epochs = epochs
        self._codec = codec
        self._conn: psycopg.Connection | None = None
        # Streams whose epoch is released for this consumer (``deferred.released``):
        # a progress row is never removed while its consumer applies, so once
        # released, always released.
        self._released: set[progress.Stream] = set()

    @property
    def product_dsn(self) -> str:
        return self._dsn

    def for_consumer(self, consumer: str) -> Applier:
        """An applier of the same database, epochs and codec under another consumer
        name (an operator's repair of a shadow rebuild's entry, say), bound to the
        generation a shadow applies into (``progress.bound_generation``)."""
        with psycopg.connect(self._dsn, autocommit=True) as conn:
            generation = progress.bound_generation(conn, consumer)
        return Applier(self._dsn, self._epochs, self._codec, consumer, shadow_generation=generation)

    def current_epochs(self, pairs: set[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """The catalogs' current epochs, as the control database says now."""
        return self._epochs.epochs(pairs, refresh=True)

    def connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self._dsn)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def apply(self, messages: Sequence[RawMessage]) -> BatchResult:
        """Apply ``messages``; when this returns, their effects are committed.

        The caller may acknowledge the messages only after this returns. If it raises,
        nothing of the batch is committed and the messages must be delivered again.
        A message that cannot be decoded, or whose event fails to apply on its own,
        is quarantined (committed) instead of raising (except when the schema registry
        is unavailable, ``CodecError.retryable``: that raises, so the batch is delivered
        again rather than good events set aside); so is a parked event whose
        release fails, and an event that would park on a skipped one. An event of a
        paused catalog (``pauses``) in its current epoch is kept aside
        (``deferred``, ``paused``), and so is one of a current epoch not released for
        this consumer yet (``epoch_held``: no cutover at that epoch yet). Neither
        gets an inbox row or moves progress; the messages' offsets are recorded, so
        Kafka does not deliver them again, and the gap closer hands them back when
        they are due. One of an older epoch is judged as ever (ignored, audited).
        Messages handed back (``deferred.handed_back``) lose their kept row in the
        transaction that judges them, unless they are kept aside again.
        """
        result = BatchResult(received=len(messages))
        decoded: list[_Decoded] = []
        undecodable: list[tuple[RawMessage, CodecError]] = []
        for message in messages:
            try:
                if message.value is None:
                    raise Truncated("message has no value")
                decoded.append(_Decoded(message, self._codec.decode_value(message.value)))
            except CodecError as exc:
                if exc.retryable:
                    raise  # the registry is unavailable: the bytes may be good
                undecodable.append((message, exc))
        keys = {(d.event.tenant_id, d.event.catalog_id) for d in decoded}
        with self._unpaused(keys) as allowed:
            paused: list[_Decoded] = []
            if len(allowed) < len(keys):
                # A paused catalog's events of its current epoch wait; those of an
                # older one go on to their terminal, audited ``ignored_old_epoch``.
                epochs = self._epochs.epochs(keys - allowed, refresh=True)

                def waits(d: _Decoded) -> bool:
                    key = (d.event.tenant_id, d.event.catalog_id)
                    return key not in allowed and d.event.history_epoch >= epochs.get(key, 0)

                paused = [d for d in decoded if waits(d)]
                decoded = [d for d in decoded if not waits(d)]
            return self._apply_decoded(messages, decoded, undecodable, result, paused)

    @contextmanager
    def _unpaused(self, keys: set[tuple[str, str]]) -> Iterator[frozenset[tuple[str, str]]]:
        """The catalogs of ``keys`` not paused, counted as in flight (``db.control.pauses``)."""
        if self._pauses is None:
            yield frozenset(keys)
            return
        with self._pauses.working_on_unpaused(keys) as allowed:
            yield allowed

    def _apply_decoded(
        self,
        messages: Sequence[RawMessage],
        decoded: list[_Decoded],
        undecodable: list[tuple[RawMessage, CodecError]],
        result: BatchResult,
        paused: list[_Decoded],
    ) -> BatchResult:
        current, unknown_epoch = self._check_epochs(decoded)
        unknown = {id(d) for d in unknown_epoch}
        decoded = [d for d in decoded if id(d) not in unknown]
        conn = self.connection()
        bad: list[tuple[RawMessage, CodecError]] = []  # newly quarantined, to log
        early: list[_Decoded] = []
        try:
            with conn.transaction():
                # Before any progress row is locked: locking creates missing rows.
                held = self._not_released(conn, decoded, current)
                if held:
                    decoded = [d for d in decoded if id(d) not in held]
                self._apply_in_transaction(conn, decoded, current, result)
                for message, error in undecodable:
                    opened = self._undecodable(conn, message, error)
                    result.quarantined += opened
                    if opened:
                        bad.append((message, error))
                offsets.record(conn, self.consumer, messages)
                for d in unknown_epoch:
                    epoch = current.get((d.event.tenant_id, d.event.catalog_id))
                    opened = quarantine(
                        conn,
                        self.consumer,
                        d.message,
                        EpochUnknown.code,
                        f"history epoch {d.event.history_epoch} is not current for "
                        f"{d.event.tenant_id}/{d.event.catalog_id} (control database says "
                        f"{epoch}); retry after the epoch is issued",
                        d.event,
                    )
                    result.quarantined += opened
                    if opened:
                        early.append(d)
                result.deferred, result.held = self._set_aside(
                    conn,
                    [*decoded, *unknown_epoch, *paused, *held.values()],
                    paused,
                    list(held.values()),
                )
        except (psycopg.OperationalError, psycopg.InterfaceError):
            raise  # connection trouble: retry the whole batch
        except psycopg.Error as exc:
            # One event's data broke the transaction. Apply one by one to find it.
            if len(messages) == 1 and decoded:
                return self._isolate(conn, decoded[0], current, exc, result)
            log.warning("batch of %d failed (%s); applying one by one", len(messages), exc)
            return self._apply_singly(messages)
        # Logged once committed: a rolled-back batch quarantined nothing.
        for message, error in bad:
            log.error(
                "quarantined undecodable message (partition %s, offset %s): %s",
                message.partition,
                message.offset,
                error,
                extra=event_fields(message.stream, message.position),
            )
        for d in early:
            log.error(
                "quarantined event %s: its history epoch is not current",
                d.event.event_id,
                extra=event_fields(d.event.stream, d.event.position, d.event.event_id),
            )
        return result

    def _not_released(
        self,
        conn: psycopg.Connection,
        decoded: list[_Decoded],
        current: dict[tuple[str, str], int],
    ) -> dict[int, _Decoded]:
        """The events of a current epoch not released for this consumer yet (no
        cutover at it: ``deferred``), by ``id``. Old epochs are judged as ever, and an
        epoch the control database does not know is quarantined before this."""
        streams = {
            d.event.stream
            for d in decoded
            if d.event.history_epoch == current.get((d.event.tenant_id, d.event.catalog_id))
        } - self._released
        if not streams:
            return {}
        found = deferred.released(conn, self.consumer, streams)
        self._released |= found
        waiting = streams - found
        return {id(d): d for d in decoded if d.event.stream in waiting}

    def _set_aside(
        self,
        conn: psycopg.Connection,
        judged: list[_Decoded],
        paused: list[_Decoded],
        held: list[_Decoded],
    ) -> tuple[int, int]:
        """Keep the paused and held deliveries (``deferred.keep``) and forget the
        handed-back ones of ``judged`` that are not kept again, in the batch's
        transaction; the numbers kept for each reason."""
        kept = [deferred.Kept(d.event, d.message.value or b"", deferred.PAUSED) for d in paused]
        kept += [deferred.Kept(d.event, d.message.value or b"", deferred.EPOCH_HELD) for d in held]
        deferred.keep(conn, self.consumer, kept)
        again = {k.event.event_id for k in kept}
        deferred.forget(
            conn,
            self.consumer,
            {
                d.event.event_id
                for d in judged
                if deferred.handed_back(d.message) and d.event.event_id not in again
            },
        )
        return len(paused), len(held)

    def resume_offsets(self, topic: str) -> dict[int, int]:
        """Where to resume each partition of ``topic``, from the product database.

        Uses its own connection: it runs during a rebalance, possibly while a batch
        transaction is open on the applier's connection.
        """
        with psycopg.connect(self._dsn) as conn:
            return offsets.load(conn, self.consumer, topic)

    def _check_epochs(
        self, decoded: list[_Decoded]
    ) -> tuple[dict[tuple[str, str], int], list[_Decoded]]:
        """Current epochs, and the events whose epoch the control database does not know.

        An epoch newer than the cached one gets a fresh look first (a fence may have
        just issued it). If the control database still does not know it, the event is
        held in quarantine: its stream's progress stops before it, while other streams
        in the same partition keep flowing.
        """
        pairs = {(d.event.tenant_id, d.event.catalog_id) for d in decoded}
        current = self._epochs.epochs(pairs)

        def ahead(d: _Decoded, epochs: dict[tuple[str, str], int]) -> bool:
            epoch = epochs.get((d.event.tenant_id, d.event.catalog_id))
            return epoch is None or d.event.history_epoch > epoch

        suspects = [d for d in decoded if ahead(d, current)]
        if suspects:
            fresh = self._epochs.epochs(
                {(d.event.tenant_id, d.event.catalog_id) for d in suspects}, refresh=True
            )
            current.update(fresh)
            suspects = [d for d in suspects if ahead(d, current)]
        return current, suspects

    def _apply_singly(self, messages: Sequence[RawMessage]) -> BatchResult:
        total = BatchResult()
        for message in messages:
            total.add(self.apply([message]))  # each counts itself received
        return total

    def release_parked(self, event_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
        """Look at stored parked events again, as if they had just arrived; returns the
        outcome of each one released (absent: still parked, or not parked at all).

        One transaction, the applier's own (``_apply_in_transaction``): a released event
        is applied with everything it releases in turn, and progress advances. If
        applying fails, the event whose write fails is moved to quarantine (its own
        transaction) and the rest is tried again without it.
        """
        conn = self.connection()
        while True:
            try:
                with conn.transaction():
                    stored = parking.load(conn, self.consumer, event_ids, self._codec)
                    return self._apply_in_transaction(conn, [], {}, BatchResult(), stored)
            except (psycopg.OperationalError, psycopg.InterfaceError):
                raise
            except psycopg.Error as exc:
                failed = self._first_failure(conn, [], {}, event_ids)
                event, error = failed if failed is not None else (None, exc)
                with conn.transaction():
                    moved = set_aside(
                        conn,
                        self.consumer,
                        [
                            SetAside(
                                e, _apply_failed_code(error), f"{error}; on an operator's retry"
                            )
                            for e in ([event.event_id] if event else event_ids)
                        ],
                    )
                log.error(
                    "parked events set aside on retry: %s",
                    sorted(map(str, moved)),
                    extra=event_fields(event.stream, event.position, event.event_id)
                    if event is not None and len(moved) == 1
                    else {},
                )
                if event is None or not moved:
                    return {}

    def _undecodable(self, conn: psycopg.Connection, message: RawMessage, error: CodecError) -> int:
        """Quarantine a message that does not decode, unless an operator skipped these
        very bytes already: then this copy is kept as skipped too (audited), and where
        its position is known (a retained copy) progress may pass it. Returns 1 for a
        new open entry."""
        skipped = skipped_copy(conn, self.consumer, message.value)
        if skipped is None:
            return int(quarantine(conn, self.consumer, message, error.code, str(error)))
        kept = keep_skipped(conn, self.consumer, message, error.code, str(error), skipped)
        if kept and message.stream is not None and message.position is not None:
            skips.skip_position(conn, self.consumer, message.stream, message.position)
        return 0

    def _isolate(
        self,
        conn: psycopg.Connection,
        item: _Decoded,
        current: dict[tuple[str, str], int],
        exc: psycopg.Error,
        result: BatchResult,
    ) -> BatchResult:
        """Find which event of a failing one-message batch fails, and quarantine that one.

        One message can apply several events: the parked ones its event releases.
        1. run the batch again with each projection write in a savepoint of its own,
           and roll all of it back: the first write that fails names the event;
        2. if that is the message's own event (or none is named), quarantine it with
           the message and the message's offset, in one transaction;
        3. otherwise it is a released parked event: move it from parking to
           quarantine (one transaction), then apply the message again, which now
           releases the rest without it.
        A crash after 3's move and before the message applies leaves the parked event
        quarantined and the message unacknowledged: delivered again, it applies.
        """
        failed = self._first_failure(conn, [item], current, ())
        if failed is None or failed[0].event_id == item.event.event_id:
            return self._quarantine_one(conn, item, failed[1] if failed else exc, result)
        event, error = failed
        with conn.transaction():
            moved = set_aside(
                conn,
                self.consumer,
                [
                    SetAside(
                        event.event_id,
                        _apply_failed_code(error),
                        f"{error}; released by event {item.event.event_id}"
                        f" (position {item.event.position})",
                    )
                ],
            )
        if not moved:  # no longer parked: nothing else to blame
            return self._quarantine_one(conn, item, error, result)
        log.error(
            "quarantined released parked event %s: %s",
            event.event_id,
            error,
            extra=event_fields(event.stream, event.position, event.event_id),
        )
        again = self.apply([item.message])
        again.received = result.received
        again.quarantined += len(moved)
        return again

    def _first_failure(
        self,
        conn: psycopg.Connection,
        decoded: list[_Decoded],
        current: dict[tuple[str, str], int],
        recheck_ids: Sequence[uuid.UUID],
    ) -> tuple[Envelope, psycopg.Error] | None:
        """The event whose projection write fails, found in a transaction rolled back."""
        try:
            with conn.transaction():
                stored = parking.load(conn, self.consumer, recheck_ids, self._codec)
                self._apply_in_transaction(
                    conn, decoded, current, BatchResult(), stored, isolate=True
                )
                raise _RollBack
        except _Failure as failure:
            return failure.event, failure.error
        except (_RollBack, psycopg.Error):
            return None

    def _quarantine_one(
        self, conn: psycopg.Connection, item: _Decoded, exc: psycopg.Error, result: BatchResult
    ) -> BatchResult:
        code = _apply_failed_code(exc)
        with conn.transaction():
            result.quarantined += quarantine(
                conn, self.consumer, item.message, code, str(exc), item.event
            )
            offsets.record(conn, self.consumer, [item.message])
            if deferred.handed_back(item.message):  # the quarantine keeps it now
                deferred.forget(conn, self.consumer, [item.event.event_id])
        e = item.event
        log.error(
            "quarantined event %s: %s",
            e.event_id,
            exc,
            extra=event_fields(e.stream, e.position, e.event_id),
        )
        return result

    def _apply_in_transaction(
        self,
        conn: psycopg.Connection,
        decoded: list[_Decoded],
        current_epochs: dict[tuple[str, str], int],
        result: BatchResult,
        recheck: list[Parked] | None = None,
        isolate: bool = False,
    ) -> dict[uuid.UUID, str]:
        """The applier's transaction, in the order the code runs it:

        1. lock the progress rows of every stream in the batch;
        2. drop events the inbox already has, repeats within the batch, and events at
           or below the stream's durable progress (every such position already has
           its terminal outcome: a late copy is a duplicate, also once the inbox row
           it had was pruned or its event was skipped), except one whose position
           the inbox holds under another event id: the resolver's history went back
           (``rewound.reused``), and it is judged as new;
        3. old-epoch events get the audited terminal outcome ``ignored_old_epoch``;
           of the rest, a reused position flags its stream rewound, and every event of
           a flagged stream is quarantined ``STREAM_REWOUND`` (``rewound.hold``);
        4. load applied revisions and the parked events the batch may release;
        5. plan: applied / ignored_stale / parked, releasing parked dependants (a
           released one of an epoch no longer current is ``ignored_old_epoch``, never
           applied); an event that would park on a revision an operator skipped is
           quarantined instead (``DEPENDENCY_SKIPPED``);
        6. write inbox outcomes (closing open quarantine entries of events that now
           have one: another copy of them got through), parking, and every projection
           (``projections.registry``);
        7. advance each stream's contiguous progress (never backwards).
        ``recheck``: stored parked events to consider first (an operator's retry).
        ``isolate``: write each event's projection rows in a savepoint of its own and
        raise ``_Failure`` naming the first that fails (diagnosis only).
        Returns the outcomes of the stored parked events released.
        COMMIT (by the caller's ``transaction()``) makes all of it durable together;
        a crash before it leaves nothing, and redelivery starts over. A crash after
        COMMIT and before the offsets are acknowledged redelivers events the inbox
        now knows, so they count as duplicates and change nothing.
        """
        recheck = recheck or []
        streams = {d.event.stream for d in decoded} | {p.event.stream for p in recheck}
        locked = progress.lock(conn, self.consumer, streams, generation=self.shadow_generation)
        counts: dict[progress.Stream, progress.Counts] = defaultdict(progress.Counts)

        seen = inbox.known(conn, self.consumer, (d.event.event_id for d in decoded))
        fresh: dict[uuid.UUID, _Decoded] = {}
        late: dict[uuid.UUID, _Decoded] = {}  # at or below progress: duplicates, unless…
        for d in decoded:
            behind = locked.get(d.event.stream)
            if d.event.event_id in seen or d.event.event_id in fresh or d.event.event_id in late:
                counts[d.event.stream].duplicates += 1
            elif behind is not None and d.event.position <= behind.position:
                late[d.event.event_id] = d
            else:
                fresh[d.event.event_id] = d
        reused = rewound.reused(conn, self.consumer, (d.event for d in late.values()))
        for event_id, d in late.items():
            if event_id in reused:
                fresh[event_id] = d  # …its position is held under another event id
            else:
                counts[d.event.stream].duplicates += 1

        old = [
            d
            for d in fresh.values()
            if d.event.history_epoch < current_epochs[(d.event.tenant_id, d.event.catalog_id)]
        ]
        for d in old:
            del fresh[d.event.event_id]
            counts[d.event.stream].ignored += 1
        inbox.record(conn, ((d.event, IGNORED_OLD_EPOCH) for d in old), self.consumer)
        kept, opened = rewound.hold(
            conn,
            self.consumer,
            self._epochs,
            current_epochs,
            [(d.event, d.message) for d in fresh.values()],
            reused,
        )
        for event_id in kept | reused.keys():
            dropped = fresh.pop(event_id, None)
            if dropped is not None and event_id not in kept:  # a fence overtook the batch
                counts[dropped.event.stream].duplicates += 1
        result.quarantined += opened

        events = [d.event for d in fresh.values()]
        # Parked events wait only on aggregates of their own tenant and catalog. Where
        # nothing is parked, no aggregate has anything waiting and the lookups are
        # skipped; the progress locks keep this batch's streams from parking meanwhile.
        catalogs = {(e.tenant_id, e.catalog_id) for e in events}
        catalogs |= {(p.event.tenant_id, p.event.catalog_id) for p in recheck}
        flags = parking.catalogs_waiting(conn, self.consumer, catalogs)
        nothing_parked = catalogs - flags.parked
        # The generation each catalog's events go to: the one this consumer's progress
        # rows of the catalog point at (a cutover moves them all together).
        generation = progress.generations(conn, self.consumer, locked, catalogs)

        def waiting_on(keys: Iterable[AggregateKey]) -> list[Parked]:
            return parking.waiting_on(
                conn,
                self.consumer,
                (k for k in keys if (k[0], k[1]) not in nothing_parked),
                self._codec,
            )

        parked = waiting_on({aggregate_key(e) for e in events})
        keys = {k for e in events for k in named_keys(e)}
        keys |= parking.keys_named(parked) | parking.keys_named(recheck)
        revisions = self._revisions(conn, keys, generation)

        # Every parked event the plan may release, including those a cascade loads.
        by_id = {p.event.event_id: p for p in parked}
        by_id.update((p.event.event_id, p) for p in recheck)

        def load_more(
            more: list[AggregateKey],
        ) -> tuple[list[Parked], dict[AggregateKey, int]]:
            found = waiting_on(more)
            by_id.update((p.event.event_id, p) for p in found)
            return found, self._revisions(conn, parking.keys_named(found), generation)

        # A parked event of an epoch that is no longer current is never applied,
        # whatever releases it; operator retries name catalogs the batch may not.
        epochs = dict(current_epochs)
        unseen = {(p.event.tenant_id, p.event.catalog_id) for p in recheck} - epochs.keys()
        if unseen:
            epochs.update(self._epochs.epochs(unseen))

        def superseded(event: Envelope) -> bool:
            current = epochs.get((event.tenant_id, event.catalog_id))
            return current is not None and event.history_epoch < current

        plan = plan_batch(events, revisions, parked, load_more, recheck, superseded)
        self._set_aside_waiting_on_skipped(conn, plan, fresh, flags.skipped, result)

        inbox.record(
            conn,
            ((fresh[i].event, outcome) for i, outcome in plan.outcomes.items()),
            self.consumer,
            supersede=True,
        )
        inbox.set_outcomes(conn, self.consumer, plan.released)
        parking.park(
            conn, self.consumer, [(e, fresh[e.event_id].message, m) for e, m in plan.to_park]
        )
        parking.unpark(conn, self.consumer, plan.released)
        for event_id, outcome in plan.outcomes.items():
            c = counts[fresh[event_id].event.stream]
            if outcome == APPLIED:
                c.applied += 1
            elif outcome == IGNORED_STALE:
                c.ignored += 1
            elif outcome == PARKED:
                c.parked += 1
        released_events: list[Envelope] = []
        for event_id, outcome in plan.released.items():
            event = by_id[event_id].event if event_id in by_id else None
            if event is None:
                continue
            released_events.append(event)
            c = counts[event.stream]
            c.released += 1
            if outcome == APPLIED:
                c.applied += 1
            else:
                c.ignored += 1
        for gen, events_of_gen in _by_generation(plan.to_apply, generation).items():
            if not isolate:
                registry.apply(conn, gen, events_of_gen)
                continue
            for event in events_of_gen:
                try:
                    with conn.transaction():
                        registry.apply(conn, gen, [event])
                except psycopg.Error as exc:
                    raise _Failure(event, exc) from exc

        extra = {e.stream for e in released_events} - locked.keys()
        if extra:
            locked.update(
                progress.lock(conn, self.consumer, extra, generation=self.shadow_generation)
            )
        for stream, state in locked.items():
            c = counts[stream]
            result.applied += c.applied
            result.duplicates += c.duplicates
            result.parked += c.parked
            result.released += c.released
            result.ignored += c.ignored
            result.progress[stream] = progress.advance(
                conn, self.consumer, stream, state.position, c
            )
        return plan.released

    def _set_aside_waiting_on_skipped(
        self,
        conn: psycopg.Connection,
        plan: Plan,
        fresh: dict[uuid.UUID, _Decoded],
        skipped_catalogs: set[tuple[str, str]],
        result: BatchResult,
    ) -> None:
        """Quarantine, instead of parking, each new event that misses a revision an
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
            conn, self.consumer, (aggregate_key(e, d) for e, missing in candidates for d in missing)
        )
        dead: set[uuid.UUID] = set()
        for event, missing in candidates:
            for dep in missing:
                found = skipped.get(aggregate_key(event, dep))
                if found is not None and found[0] >= dep.revision:
                    detail = skips.waits_on_skipped(dep.type, dep.id, dep.revision, found[1])
                    message = fresh[event.event_id].message
                    result.quarantined += quarantine(
                        conn, self.consumer, message, DEPENDENCY_SKIPPED, detail, event
                    )
                    dead.add(event.event_id)
                    break
        if dead:
            plan.to_park = [(e, m) for e, m in plan.to_park if e.event_id not in dead]
            for event_id in dead:
                plan.outcomes[event_id] = QUARANTINED

    def _revisions(
        self,
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
