"""Deliveries the applier took in but does not apply yet, kept in the product
database (``deferred_delivery``) until they are due, then handed back.

The batch that defers a delivery records its Kafka offset, so Kafka does not deliver
it again: the row is this consumer's only copy. Two reasons:

- ``paused``: an event of a paused catalog in its current epoch (``db.control.pauses``).
  Due once the catalog is no longer paused. Handed back after a fence it is of an
  old epoch and gets its audited ``ignored_old_epoch`` (the gap closer never fills
  a superseded stream, so nothing else would ever give it one).
- ``epoch_held``: an event of its catalog's current epoch, which is not released for
  this consumer yet. An epoch is released when it is the catalog's first
  (``db.control.epochs.FIRST_EPOCH``) or when the consumer has a progress row of it. The
  applier never creates the row of a later epoch itself: the cutover of a rebuild
  at that epoch does (``db.product.cutover.lock_live`` creates it, ``swap`` points it at the
  rebuilt generation, in one transaction), and a shadow's comes with its load. Until
  then the epoch's events would land in the generation of the history the fence
  superseded, and a read API resumed by hand (or after a failed fence rebuild) would
  serve them among rows of lost history; it reads the live row of the current epoch,
  and without one it serves nothing. Due once the epoch is released, or when it is no
  longer current (a later fence): then it is only ever ``ignored_old_epoch``.

Handing back (``processors.gaps.GapCloser.hand_back_deferred``, one page at a time):

1. ``due``: the due rows, in stream and position order, as messages of their own
   origin (``deferred_topic``, the stream and position they were kept with);
2. ``Applier.apply`` judges them like any delivery (inbox outcome, progress, audit)
   and, in the same transaction, ``forget``s each one it does not defer again and
   ``keep``s (the row updated in place) one it does (paused again, still held).

What a crash leaves:
- before the deferring batch's COMMIT: nothing; its offsets are not recorded either,
  and Kafka delivers the batch again;
- after it: the row and the recorded offset. A redelivery anyway (the offset had not
  reached Kafka before a rebalance) keeps the same row (one per consumer and event);
- between ``due`` and the hand-back's COMMIT: the rows, untouched; the next pass
  hands them back again;
- after that COMMIT: their outcomes and no rows. Two passes handing back the same row
  (a lost recovery lease) serialize on the stream's progress lock: the second finds
  the event in the inbox, a duplicate, applied once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import quote

import psycopg

from db.control.epochs import FIRST_EPOCH
from processors.applier.messages import RawMessage
from processors.applier.progress import Stream
from schemas.events import Envelope

PAUSED = "paused"
EPOCH_HELD = "epoch_held"

DEFERRED_TOPIC = "deferred-delivery"

Key = tuple[str, str]


def deferred_topic(stream: Stream) -> str:
    """The origin a handed-back delivery is judged under (quarantine, outcomes): one
    per stream, so two streams' deliveries at one position never collide."""
    t, c, e = stream
    return f"{DEFERRED_TOPIC}/{quote(t, safe='')}/{quote(c, safe='')}/{e}"


def handed_back(message: RawMessage) -> bool:
    return message.partition < 0 and message.topic.startswith(DEFERRED_TOPIC + "/")


@dataclass(frozen=True, slots=True)
class Kept:
    event: Envelope
    value: bytes
    reason: str


def keep(conn: psycopg.Connection, consumer: str, kept: Sequence[Kept]) -> None:
    """Store each delivery with its reason, in the caller's transaction (one
    statement). One already kept (a redelivery, or a handed-back delivery deferred
    again) keeps its row and takes the new reason."""
    once = {k.event.event_id: k for k in kept}  # a statement may update a row once
    if not once:
        return
    rows = [
        (
            consumer,
            k.event.event_id,
            k.event.tenant_id,
            k.event.catalog_id,
            k.event.history_epoch,
            k.event.position,
            k.reason,
            k.value,
        )
        for k in once.values()
    ]
    conn.execute(
        "INSERT INTO deferred_delivery (consumer, event_id, tenant_id, catalog_id,"
        " history_epoch, position, reason, value)"
        " SELECT * FROM unnest(%b::text[], %b::uuid[], %b::text[], %b::text[], %b::int8[],"
        " %b::int8[], %b::text[], %b::bytea[])"
        " ON CONFLICT (consumer, event_id) DO UPDATE SET reason = excluded.reason",
        [list(column) for column in zip(*rows, strict=True)],
    )


def forget(conn: psycopg.Connection, consumer: str, event_ids: Iterable[uuid.UUID]) -> int:
    """Remove the rows of deliveries handed back and judged, in the caller's
    transaction; how many there were."""
    ids = list(event_ids)
    if not ids:
        return 0
    return conn.execute(
        "DELETE FROM deferred_delivery WHERE consumer = %b AND event_id = ANY(%b::uuid[])",
        (consumer, ids),
    ).rowcount


def released(conn: psycopg.Connection, consumer: str, streams: Iterable[Stream]) -> set[Stream]:
    """The streams of ``streams`` whose epoch is released for ``consumer``: the first
    epoch, or one the consumer has a progress row of. Reads, never creates."""
    wanted = set(streams)
    found = {s for s in wanted if s[2] <= FIRST_EPOCH}
    later = sorted(wanted - found)
    if not later:
        return found
    rows = conn.execute(
        "SELECT p.tenant_id, p.catalog_id, p.history_epoch FROM stream_progress p"
        " JOIN unnest(%b::text[], %b::text[], %b::int8[]) AS k(t, c, e)"
        " ON p.tenant_id = k.t AND p.catalog_id = k.c AND p.history_epoch = k.e"
        " WHERE p.consumer = %b",
        ([s[0] for s in later], [s[1] for s in later], [s[2] for s in later], consumer),
    ).fetchall()
    found.update((str(t), str(c), int(e)) for t, c, e in rows)
    return found


def due(
    conn: psycopg.Connection,
    consumer: str,
    paused: frozenset[Key],
    current: Callable[[set[Key]], dict[Key, int]],
    limit: int,
) -> list[RawMessage]:
    """Up to ``limit`` kept deliveries that are due (module docstring), in stream and
    position order, as messages to hand back. ``paused``: the catalogs paused now;
    ``current``: the catalogs' current epochs (the control database's word)."""
    groups = conn.execute(
        "SELECT g.tenant_id, g.catalog_id, g.history_epoch, g.reason, EXISTS (SELECT 1"
        "  FROM stream_progress p WHERE p.consumer = %(c)s AND p.tenant_id = g.tenant_id"
        "  AND p.catalog_id = g.catalog_id AND p.history_epoch = g.history_epoch)"
        " FROM (SELECT DISTINCT tenant_id, catalog_id, history_epoch, reason"
        "  FROM deferred_delivery WHERE consumer = %(c)s) g",
        {"c": consumer},
    ).fetchall()
    waiting = [
        ((str(t), str(c), int(e)), str(reason), bool(row))
        for t, c, e, reason, row in groups
        if (str(t), str(c)) not in paused
    ]
    held = {s[:2] for s, reason, row in waiting if reason == EPOCH_HELD and not row}
    epochs = current(held) if held else {}

    def is_due(stream: Stream, reason: str, row: bool) -> bool:
        if reason == PAUSED or row or stream[2] <= FIRST_EPOCH:
            return True
        epoch = epochs.get((stream[0], stream[1]))
        return epoch is not None and stream[2] < epoch

    ready = sorted((*s, reason) for s, reason, row in waiting if is_due(s, reason, row))
    if not ready:
        return []
    rows = conn.execute(
        "SELECT d.tenant_id, d.catalog_id, d.history_epoch, d.position, d.value"
        " FROM deferred_delivery d"
        " JOIN unnest(%b::text[], %b::text[], %b::int8[], %b::text[]) AS k(t, c, e, r)"
        " ON d.tenant_id = k.t AND d.catalog_id = k.c AND d.history_epoch = k.e"
        " AND d.reason = k.r"
        ' WHERE d.consumer = %b ORDER BY d.tenant_id COLLATE "C", d.catalog_id COLLATE "C",'
        " d.history_epoch, d.position, d.event_id LIMIT %s",
        (*[list(column) for column in zip(*ready, strict=True)], consumer, limit),
    ).fetchall()
    messages = []
    for t, c, e, position, value in rows:
        stream = (str(t), str(c), int(e))
        messages.append(
            RawMessage(
                deferred_topic(stream), -1, int(position), None, bytes(value), stream, int(position)
            )
        )
    return messages
