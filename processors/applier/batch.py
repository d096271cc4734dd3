"""Applying a batch of messages in one product transaction."""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import psycopg

from db.epochs import EpochSource
from processors.applier import inbox, offsets, parking, progress
from processors.applier.exceptions import EpochUnknown
from processors.applier.messages import RawMessage
from processors.applier.plan import (
    APPLIED,
    IGNORED_OLD_EPOCH,
    IGNORED_STALE,
    PARKED,
    Parked,
    named_keys,
    plan_batch,
)
from processors.applier.quarantine import quarantine
from processors.projections import registry
from schemas.codec import EventCodec
from schemas.events import Envelope, aggregate_key
from schemas.exceptions import CodecError, Truncated
from schemas.ids import AggregateKey

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
    progress: dict[progress.Stream, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Decoded:
    message: RawMessage
    event: Envelope


class Applier:
    """Applies batches of raw messages; owns one product-database connection."""

    def __init__(
        self,
        product_dsn: str,
        epochs: EpochSource,
        codec: EventCodec,
        consumer: str = DEFAULT_CONSUMER,
    ) -> None:
        self.consumer = consumer
        self._dsn = product_dsn
        self._epochs = epochs
        self._codec = codec
        self._conn: psycopg.Connection | None = None

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
        is quarantined (committed) instead of raising.
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
                undecodable.append((message, exc))
        current, unknown_epoch = self._check_epochs(decoded)
        held = {id(d) for d in unknown_epoch}
        decoded = [d for d in decoded if id(d) not in held]
        conn = self.connection()
        try:
            with conn.transaction():
                self._apply_in_transaction(conn, decoded, current, result)
                for message, error in undecodable:
                    result.quarantined += quarantine(
                        conn, self.consumer, message, error.code, str(error)
                    )
                offsets.record(conn, self.consumer, messages)
                for d in unknown_epoch:
                    epoch = current.get((d.event.tenant_id, d.event.catalog_id))
                    result.quarantined += quarantine(
                        conn,
                        self.consumer,
                        d.message,
                        EpochUnknown.code,
                        f"history epoch {d.event.history_epoch} is not current for "
                        f"{d.event.tenant_id}/{d.event.catalog_id} (control database says "
                        f"{epoch}); retry after the epoch is issued",
                        d.event,
                    )
        except (psycopg.OperationalError, psycopg.InterfaceError):
            raise  # connection trouble: retry the whole batch
        except psycopg.Error as exc:
            # One event's data broke the transaction. Apply one by one to find it.
            if len(messages) == 1 and decoded:
                return self._quarantine_one(conn, decoded[0], exc, result)
            log.warning("batch of %d failed (%s); applying one by one", len(messages), exc)
            return self._apply_singly(messages)
        return result

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
        total = BatchResult(received=len(messages))
        for message in messages:
            one = self.apply([message])
            for name in ("applied", "duplicates", "parked", "released", "ignored", "quarantined"):
                setattr(total, name, getattr(total, name) + getattr(one, name))
            total.progress.update(one.progress)
        return total

    def _quarantine_one(
        self, conn: psycopg.Connection, item: _Decoded, exc: psycopg.Error, result: BatchResult
    ) -> BatchResult:
        code = "APPLY_FAILED"
        if exc.sqlstate:
            code = f"APPLY_FAILED_{exc.sqlstate}"
        with conn.transaction():
            result.quarantined += quarantine(
                conn, self.consumer, item.message, code, str(exc), item.event
            )
            offsets.record(conn, self.consumer, [item.message])
        log.error("quarantined event %s: %s", item.event.event_id, exc)
        return result

    def _apply_in_transaction(
        self,
        conn: psycopg.Connection,
        decoded: list[_Decoded],
        current_epochs: dict[tuple[str, str], int],
        result: BatchResult,
    ) -> None:
        """The applier's transaction, in the order the code runs it:

        1. lock the progress rows of every stream in the batch;
        2. drop events the inbox already has (and repeats within the batch);
        3. old-epoch events get the audited terminal outcome ``ignored_old_epoch``;
        4. load applied revisions and the parked events the batch may release;
        5. plan: applied / ignored_stale / parked, releasing parked dependants;
        6. write inbox outcomes (closing open quarantine entries of events that now
           have one: another copy of them got through), parking, and every projection
           (``projections.registry``);
        7. advance each stream's contiguous progress (never backwards).
        COMMIT (by the caller's ``transaction()``) makes all of it durable together;
        a crash before it leaves nothing, and redelivery starts over. A crash after
        COMMIT and before the offsets are acknowledged redelivers events the inbox
        now knows, so they count as duplicates and change nothing.
        """
        streams = {d.event.stream for d in decoded}
        locked = progress.lock(conn, self.consumer, streams)
        counts: dict[progress.Stream, progress.Counts] = defaultdict(progress.Counts)

        seen = inbox.known(conn, (d.event.event_id for d in decoded))
        fresh: dict[uuid.UUID, _Decoded] = {}
        for d in decoded:
            if d.event.event_id in seen or d.event.event_id in fresh:
                counts[d.event.stream].duplicates += 1
            else:
                fresh[d.event.event_id] = d

        old = [
            d
            for d in fresh.values()
            if d.event.history_epoch < current_epochs[(d.event.tenant_id, d.event.catalog_id)]
        ]
        for d in old:
            del fresh[d.event.event_id]
            counts[d.event.stream].ignored += 1
        inbox.record(conn, ((d.event, IGNORED_OLD_EPOCH) for d in old))

        generation = {s: p.generation for s, p in locked.items()}
        events = [d.event for d in fresh.values()]
        # Parked events wait only on aggregates of their own tenant and catalog. Where
        # nothing is parked, no aggregate has anything waiting and the lookups are
        # skipped; the progress locks keep this batch's streams from parking meanwhile.
        catalogs = {(e.tenant_id, e.catalog_id) for e in events}
        nothing_parked = catalogs - parking.catalogs_with_parked(conn, catalogs)

        def waiting_on(keys: Iterable[AggregateKey]) -> list[Parked]:
            return parking.waiting_on(
                conn, (k for k in keys if (k[0], k[1]) not in nothing_parked), self._codec
            )

        parked = waiting_on({aggregate_key(e) for e in events})
        keys = {k for e in events for k in named_keys(e)} | parking.keys_named(parked)
        revisions = self._revisions(conn, keys, generation)

        # Every parked event the plan may release, including those a cascade loads.
        by_id = {p.event.event_id: p for p in parked}

        def load_more(
            more: list[AggregateKey],
        ) -> tuple[list[Parked], dict[AggregateKey, int]]:
            found = waiting_on(more)
            by_id.update((p.event.event_id, p) for p in found)
            return found, self._revisions(conn, parking.keys_named(found), generation)

        plan = plan_batch(events, revisions, parked, load_more)

        inbox.record(
            conn,
            ((fresh[i].event, outcome) for i, outcome in plan.outcomes.items()),
            consumer=self.consumer,
        )
        inbox.set_outcomes(conn, plan.released)
        parking.park(
            conn, [(e, fresh[e.event_id].message.value or b"", m) for e, m in plan.to_park]
        )
        parking.unpark(conn, plan.released)
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
            registry.apply(conn, gen, events_of_gen)

        extra = {e.stream for e in released_events} - locked.keys()
        if extra:
            locked.update(progress.lock(conn, self.consumer, extra))
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

    def _revisions(
        self,
        conn: psycopg.Connection,
        keys: set[AggregateKey],
        generation: dict[progress.Stream, int],
    ) -> dict[AggregateKey, int]:
        gens = {g for g in generation.values()} or {1}
        found: dict[AggregateKey, int] = {}
        for gen in gens:
            found.update(registry.load_revisions(conn, gen, keys))
        return found


def _by_generation(
    events: list[Envelope], generation: dict[progress.Stream, int]
) -> dict[int, list[Envelope]]:
    grouped: dict[int, list[Envelope]] = defaultdict(list)
    for event in events:
        grouped[generation.get(event.stream, 1)].append(event)
    return grouped
