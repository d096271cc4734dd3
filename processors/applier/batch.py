"""Applying a batch of messages in one product transaction.

``Applier.apply`` decodes the batch, sets aside what must wait (paused catalogs,
epochs not released for its consumer yet) and runs the applier's transaction
(``transaction``) with the batch's quarantine and offset writes; a transaction that
an event's data breaks goes to the failure isolation (``isolation``). What it did is
counted in a ``BatchResult`` (``tallies``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg

from db.control.epochs import EpochSource
from db.control.pauses import PauseWatch
from processors.applier import deferred, offsets, parking, progress, skips
from processors.applier.exceptions import EpochUnknown
from processors.applier.isolation import after_failure, set_aside_on_retry
from processors.applier.messages import Decoded, RawMessage
from processors.applier.quarantine import keep_skipped, quarantine, skipped_copy
from processors.applier.tallies import BatchResult
from processors.applier.traced_outcomes import kept_for, note_aside
from processors.applier.transaction import Scope, apply_in_transaction
from schemas.codec import EventCodec
from schemas.exceptions import CodecError, Truncated
from schemas.logs import event_fields

log = logging.getLogger(__name__)

DEFAULT_CONSUMER = "product-applier"


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
        self._scope = Scope(consumer, shadow_generation, epochs, codec)
        self._conn: psycopg.Connection | None = None
        # Streams whose epoch is released for this consumer (``deferred.released``):
        # a progress row is never removed while its consumer applies, so once
        # released, always released.
        self._released: set[progress.Stream] = set()

    @property
    def product_dsn(self) -> str:
        return self._dsn

    @property
    def codec(self) -> EventCodec:
        """What it decodes messages with."""
        return self._codec

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
        result = BatchResult(received=len(messages), traced=kept_for(messages))
        decoded: list[Decoded] = []
        undecodable: list[tuple[RawMessage, CodecError]] = []
        for message in messages:
            try:
                if message.value is None:
                    raise Truncated("message has no value")
                decoded.append(Decoded(message, self._codec.decode_value(message.value)))
            except CodecError as exc:
                if exc.retryable:
                    raise  # the registry is unavailable: the bytes may be good
                undecodable.append((message, exc))
        keys = {(d.event.tenant_id, d.event.catalog_id) for d in decoded}
        with self._unpaused(keys) as allowed:
            paused: list[Decoded] = []
            if len(allowed) < len(keys):
                # A paused catalog's events of its current epoch wait; those of an
                # older one go on to their terminal, audited ``ignored_old_epoch``.
                epochs = self._epochs.epochs(keys - allowed, refresh=True)

                def waits(d: Decoded) -> bool:
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
        decoded: list[Decoded],
        undecodable: list[tuple[RawMessage, CodecError]],
        result: BatchResult,
        paused: list[Decoded],
    ) -> BatchResult:
        current, unknown_epoch = self._check_epochs(decoded)
        unknown = {id(d) for d in unknown_epoch}
        decoded = [d for d in decoded if id(d) not in unknown]
        conn = self.connection()
        bad: list[tuple[RawMessage, CodecError]] = []  # newly quarantined, to log
        early: list[Decoded] = []
        try:
            with conn.transaction():
                # Before any progress row is locked: locking creates missing rows.
                held = self._not_released(conn, decoded, current)
                if held:
                    decoded = [d for d in decoded if id(d) not in held]
                apply_in_transaction(conn, self._scope, decoded, current, result)
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
            return after_failure(
                conn, self._scope, self.apply, messages, decoded, current, exc, result
            )
        note_aside(result.traced, (m for m, _ in undecodable), unknown_epoch, paused, held.values())
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
        decoded: list[Decoded],
        current: dict[tuple[str, str], int],
    ) -> dict[int, Decoded]:
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
        judged: list[Decoded],
        paused: list[Decoded],
        held: list[Decoded],
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
        self, decoded: list[Decoded]
    ) -> tuple[dict[tuple[str, str], int], list[Decoded]]:
        """Current epochs, and the events whose epoch the control database does not know.

        An epoch newer than the cached one gets a fresh look first (a fence may have
        just issued it). If the control database still does not know it, the event is
        held in quarantine: its stream's progress stops before it, while other streams
        in the same partition keep flowing.
        """
        pairs = {(d.event.tenant_id, d.event.catalog_id) for d in decoded}
        current = self._epochs.epochs(pairs)

        def ahead(d: Decoded, epochs: dict[tuple[str, str], int]) -> bool:
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

    def release_parked(self, event_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
        """Look at stored parked events again, as if they had just arrived; returns the
        outcome of each one released (absent: still parked, or not parked at all).

        One transaction, the applier's own (``transaction.apply_in_transaction``): a
        released event is applied with everything it releases in turn, and progress
        advances. If applying fails, the event whose write fails is moved to quarantine
        (its own transaction, ``isolation.set_aside_on_retry``) and the rest is tried
        again without it.
        """
        conn = self.connection()
        while True:
            try:
                with conn.transaction():
                    stored = parking.load(conn, self.consumer, event_ids, self._codec)
                    return apply_in_transaction(conn, self._scope, [], {}, BatchResult(), stored)
            except (psycopg.OperationalError, psycopg.InterfaceError):
                raise
            except psycopg.Error as exc:
                if not set_aside_on_retry(conn, self._scope, event_ids, exc):
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
