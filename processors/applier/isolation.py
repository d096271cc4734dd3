"""Failure isolation: when one event's data breaks an applier transaction, find that
event and hand it to quarantine, so that everything else applies without it.

- A batch of several messages whose transaction fails is applied again one message
  at a time (``after_failure``): each message then isolates its own failure.
- A one-message batch that fails is diagnosed (``_isolate``): the event whose
  projection write fails is quarantined, be it the message's own or a parked event
  the message releases.
- An operator's retry of parked events that fails sets the failing one aside
  (``set_aside_on_retry``) and the caller retries the rest.
Connection trouble never comes here: the caller raises, and the batch is delivered
again.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence

import psycopg

from processors.applier import deferred, offsets, parking
from processors.applier.messages import Decoded, RawMessage
from processors.applier.plan import QUARANTINED
from processors.applier.quarantine import SetAside, quarantine, set_aside
from processors.applier.tallies import BatchResult
from processors.applier.traced_outcomes import note
from processors.applier.transaction import Scope, apply_in_transaction
from processors.projections import registry
from schemas.events import Envelope
from schemas.logs import event_fields

log = logging.getLogger(__name__)

# Applies a batch of messages and commits it (``Applier.apply``): isolation applies
# again what is left once the failing event is set aside.
Apply = Callable[[Sequence[RawMessage]], BatchResult]


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


def after_failure(
    conn: psycopg.Connection,
    scope: Scope,
    apply: Apply,
    messages: Sequence[RawMessage],
    decoded: list[Decoded],
    current: dict[tuple[str, str], int],
    exc: psycopg.Error,
    result: BatchResult,
) -> BatchResult:
    """The batch ``messages``, whose transaction ``exc`` rolled back, applied without
    the event that broke it: a single message's is isolated, a bigger batch is
    applied again one message at a time."""
    if len(messages) == 1 and decoded:
        return _isolate(conn, scope, apply, decoded[0], current, exc, result)
    log.warning("batch of %d failed (%s); applying one by one", len(messages), exc)
    return _apply_singly(apply, messages)


def _apply_singly(apply: Apply, messages: Sequence[RawMessage]) -> BatchResult:
    total = BatchResult()
    for message in messages:
        total.add(apply([message]))  # each counts itself received
    return total


def _isolate(
    conn: psycopg.Connection,
    scope: Scope,
    apply: Apply,
    item: Decoded,
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
    failed = _first_failure(conn, scope, [item], current, ())
    if failed is None or failed[0].event_id == item.event.event_id:
        return _quarantine_one(conn, scope, item, failed[1] if failed else exc, result)
    event, error = failed
    with conn.transaction():
        moved = set_aside(
            conn,
            scope.consumer,
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
        return _quarantine_one(conn, scope, item, error, result)
    log.error(
        "quarantined released parked event %s: %s",
        event.event_id,
        error,
        extra=event_fields(event.stream, event.position, event.event_id),
    )
    again = apply([item.message])
    again.received = result.received
    again.quarantined += len(moved)
    return again


def set_aside_on_retry(
    conn: psycopg.Connection,
    scope: Scope,
    event_ids: Sequence[uuid.UUID],
    exc: psycopg.Error,
) -> bool:
    """An operator's retry of the parked ``event_ids`` failed (``exc``, rolled back):
    move the event whose write fails to quarantine (its own transaction), or all of
    them when none is named. Whether to retry the rest: one was named and moved."""
    failed = _first_failure(conn, scope, [], {}, event_ids)
    event, error = failed if failed is not None else (None, exc)
    with conn.transaction():
        moved = set_aside(
            conn,
            scope.consumer,
            [
                SetAside(e, _apply_failed_code(error), f"{error}; on an operator's retry")
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
    return event is not None and bool(moved)


def _first_failure(
    conn: psycopg.Connection,
    scope: Scope,
    decoded: list[Decoded],
    current: dict[tuple[str, str], int],
    recheck_ids: Sequence[uuid.UUID],
) -> tuple[Envelope, psycopg.Error] | None:
    """The event whose projection write fails, found in a transaction rolled back."""
    try:
        with conn.transaction():
            stored = parking.load(conn, scope.consumer, recheck_ids, scope.codec)
            apply_in_transaction(
                conn, scope, decoded, current, BatchResult(), stored, write=_write_each
            )
            raise _RollBack
    except _Failure as failure:
        return failure.event, failure.error
    except (_RollBack, psycopg.Error):
        return None


def _write_each(conn: psycopg.Connection, generation: int, events: list[Envelope]) -> None:
    """Write each event's projection rows in a savepoint of its own, and raise
    ``_Failure`` naming the first that fails (diagnosis only)."""
    for event in events:
        try:
            with conn.transaction():
                registry.apply(conn, generation, [event])
        except psycopg.Error as exc:
            raise _Failure(event, exc) from exc


def _quarantine_one(
    conn: psycopg.Connection,
    scope: Scope,
    item: Decoded,
    exc: psycopg.Error,
    result: BatchResult,
) -> BatchResult:
    code = _apply_failed_code(exc)
    with conn.transaction():
        result.quarantined += quarantine(
            conn, scope.consumer, item.message, code, str(exc), item.event
        )
        offsets.record(conn, scope.consumer, [item.message])
        if deferred.handed_back(item.message):  # the quarantine keeps it now
            deferred.forget(conn, scope.consumer, [item.event.event_id])
    note(result.traced, item.message, item.event, QUARANTINED)
    e = item.event
    log.error(
        "quarantined event %s: %s",
        e.event_id,
        exc,
        extra=event_fields(e.stream, e.position, e.event_id),
    )
    return result
