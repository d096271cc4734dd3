"""The operator's repair path for quarantined messages: list, retry, skip.

Progress never passes a quarantined event on its own. An operator either retries it
(after fixing whatever made it fail) or skips it with a reason; both are recorded on
the quarantine row, so the decision stays auditable. A skip never strands what waited
on the skipped event: each parked dependant becomes an entry of its own.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

import psycopg

from processors.applier import progress, skips
from processors.applier.batch import Applier
from processors.applier.exceptions import EntryNotFound, EntryNotOpen, SkipReasonRequired
from processors.applier.messages import RawMessage
from processors.applier.plan import PARKED, QUARANTINED
from processors.applier.quarantine import (
    DEPENDENCY_NOT_APPLIED,
    DEPENDENCY_SKIPPED,
    SetAside,
    set_aside,
)
from schemas.codec import CODEC, EventCodec
from schemas.events import Envelope, aggregate_key
from schemas.exceptions import CodecError


@dataclass(frozen=True, slots=True)
class Entry:
    id: int
    consumer: str
    topic: str
    partition: int
    offset: int
    event_id: uuid.UUID | None
    stream: progress.Stream | None
    position: int | None
    error_code: str
    error_detail: str
    status: str
    created_at: datetime
    resolution: str | None


_COLUMNS = (
    'id, consumer, topic, partition, "offset", event_id, tenant_id, catalog_id,'
    " history_epoch, position, error_code, error_detail, status, created_at, resolution"
)


def _entry(row: tuple[object, ...]) -> Entry:
    (i, consumer, topic, part, off, eid, t, c, e, pos, code, detail, status, at, res) = row
    stream = (str(t), str(c), int(str(e))) if t is not None else None
    return Entry(
        int(str(i)),
        str(consumer),
        str(topic),
        int(str(part)),
        int(str(off)),
        eid if isinstance(eid, uuid.UUID) else None,
        stream,
        int(str(pos)) if pos is not None else None,
        str(code),
        str(detail),
        str(status),
        at if isinstance(at, datetime) else datetime.min,
        str(res) if res is not None else None,
    )


def list_entries(conn: psycopg.Connection, status: str | None = "open") -> list[Entry]:
    where, params = ("WHERE status = %s", (status,)) if status else ("", ())
    rows = conn.execute(f"SELECT {_COLUMNS} FROM quarantine {where} ORDER BY id", params)
    return [_entry(r) for r in rows.fetchall()]


def read_entry(conn: psycopg.Connection, entry_id: int) -> tuple[Entry, RawMessage] | None:
    """One entry, whatever its status, with the message it holds (for an operator to
    read; nothing is locked)."""
    row = conn.execute(
        f"SELECT {_COLUMNS}, key, value FROM quarantine WHERE id = %s", (entry_id,)
    ).fetchone()
    if row is None:
        return None
    entry = _entry(row[:15])
    key, value = row[15], row[16]
    return entry, RawMessage(
        entry.topic,
        entry.partition,
        entry.offset,
        bytes(key) if key is not None else None,
        bytes(value) if value is not None else None,
    )


def _load(conn: psycopg.Connection, entry_id: int) -> tuple[Entry, RawMessage]:
    row = conn.execute(
        f"SELECT {_COLUMNS}, key, value FROM quarantine WHERE id = %s FOR UPDATE", (entry_id,)
    ).fetchone()
    if row is None:
        raise EntryNotFound(f"no quarantine entry {entry_id}; see `gapless quarantine list`")
    entry = _entry(row[:15])
    if entry.status != "open":
        raise EntryNotOpen(f"entry {entry_id} is already {entry.status}: {entry.resolution}")
    key, value = row[15], row[16]
    message = RawMessage(
        entry.topic,
        entry.partition,
        entry.offset,
        bytes(key) if key is not None else None,
        bytes(value) if value is not None else None,
    )
    return entry, message


def retry(product_dsn: str, applier: Applier, entry_id: int, actor: str) -> bool:
    """Apply the stored message again; mark the entry retried if it now applies.

    1. read the entry (it must be open) and, if the applier set its event aside
       (inbox outcome ``quarantined``), clear that inbox row, in one transaction;
    2. apply its message through the normal batch path (its own transaction);
    3. if that left the event with an outcome in the inbox other than
       ``quarantined``, mark the entry retried (also when that apply closed it as
       ``superseded``: this retry got it through; an event that parked again says so
       in the resolution; `gapless parked list` shows it), except that an event set
       aside for what it waits on and parked again goes straight back (the entry
       stays open).
    A crash between 1 and 2 leaves the entry open and its event with no inbox row:
    the next retry (or a redelivery) applies it. A crash between 2 and 3 leaves the
    entry open although its event applied; a second retry then finds the event a
    duplicate and marks the entry retried.
    Returns False (entry stays open) when the message still fails or still waits
    on a skipped revision.
    """
    with psycopg.connect(product_dsn) as conn:
        entry, message = _load(conn, entry_id)
        if entry.event_id is not None:
            conn.execute(
                "DELETE FROM inbox WHERE consumer = %s AND event_id = %s"
                " AND outcome = 'quarantined'",
                (entry.consumer, entry.event_id),
            )
    # The entry's own consumer applies it (a shadow rebuild's entry is the shadow's).
    own = applier if applier.consumer == entry.consumer else applier.for_consumer(entry.consumer)
    try:
        own.apply([message])
    finally:
        if own is not applier:
            own.close()
    # A message that never decoded names no event; if it decodes now (an upgraded
    # agent reading a schema the old one did not know), its event is the one to find.
    event_id = entry.event_id if entry.event_id is not None else _event_id(applier, message)
    with psycopg.connect(product_dsn) as conn:
        row = (
            conn.execute(
                "SELECT outcome FROM inbox WHERE consumer = %s AND event_id = %s",
                (entry.consumer, event_id),
            ).fetchone()
            if event_id is not None
            else None
        )
        if event_id is None or row is None or row[0] == QUARANTINED:
            return False
        if row[0] == PARKED and entry.error_code in (DEPENDENCY_SKIPPED, DEPENDENCY_NOT_APPLIED):
            # What it waits on is still not applied: it goes back, the entry stays open.
            set_aside(
                conn,
                entry.consumer,
                [SetAside(event_id, entry.error_code, entry.error_detail)],
            )
            return False
        parked = " (parked: it waits on a dependency)" if row[0] == PARKED else ""
        conn.execute(
            "UPDATE quarantine SET status = 'retried', resolved_at = now(), resolution = %s"
            " WHERE id = %s AND status IN ('open', 'superseded')",
            (f"retried by {actor}{parked}", entry_id),
        )
    return True


def _event_id(applier: Applier, message: RawMessage) -> uuid.UUID | None:
    """The id of the event ``message`` carries, if the applier's codec reads it."""
    if message.value is None:
        return None
    try:
        return applier.codec.decode_value(message.value).event_id
    except CodecError:
        return None


@dataclass(frozen=True, slots=True)
class Skipped:
    """What a skip did: the stream's new progress (None when the entry's position is
    unknown) and the entries its parked dependants were moved to."""

    progress: int | None
    set_aside: dict[uuid.UUID, int] = field(default_factory=dict)


def skip(product_dsn: str, entry_id: int, reason: str, actor: str) -> int | None:
    """Give up on an entry with an audited reason; returns the stream's new progress."""
    return skip_entry(product_dsn, entry_id, reason, actor).progress


def skip_entry(
    product_dsn: str, entry_id: int, reason: str, actor: str, codec: EventCodec = CODEC
) -> Skipped:
    """Give up on an entry with an audited reason (one transaction, ``skip_in``)."""
    if not reason.strip():
        raise SkipReasonRequired("a skip needs a reason (--reason)")
    with psycopg.connect(product_dsn) as conn:
        return skip_in(conn, entry_id, reason, actor, codec)


def skip_in(
    conn: psycopg.Connection, entry_id: int, reason: str, actor: str, codec: EventCodec
) -> Skipped:
    """Skip an open entry in the caller's transaction, in this order:

    1. lock the entry (it must be open) and decode its message, if it decodes;
    2. mark it skipped with the reason, and with the aggregate revision it gives up;
    3. where its stream position is known: lock the stream's progress row and record
       the position ``skipped`` in the inbox (a terminal outcome; a message that never
       decoded gets an id derived from its stream and position);
    4. move every parked event that waits on the given-up revision to quarantine
       (``DEPENDENCY_SKIPPED``, each an entry of its own with its own retry and skip);
    5. advance the stream's progress; if the event right after it is parked, it can
       only wait for ever: it is set aside too (``skips.set_aside_blocker``).
    Nothing is visible before COMMIT; a crash leaves the entry open. An undecodable
    Kafka message has no known position: only its bytes are given up, and when the
    gap closer fetches the same bytes from the resolver for the position they hold,
    that copy is recorded skipped and progress passes it (``Applier._undecodable``).
    """
    if not reason.strip():
        raise SkipReasonRequired("a skip needs a reason (--reason)")
    entry, message = _load(conn, entry_id)
    event: Envelope | None = None
    if message.value is not None:
        try:
            event = codec.decode_value(message.value)
        except CodecError:
            event = None
    conn.execute(
        "UPDATE quarantine SET status = 'skipped', resolved_at = now(), resolution = %s,"
        " aggregate_type = %s, aggregate_id = %s, revision = %s WHERE id = %s",
        (
            f"skipped by {actor}: {reason.strip()}",
            event.aggregate.type if event else None,
            event.aggregate.id if event else None,
            event.aggregate.revision if event else None,
            entry_id,
        ),
    )
    if entry.stream is None or entry.position is None:
        return Skipped(None)
    locked = progress.lock(
        conn,
        entry.consumer,
        [entry.stream],
        generation=progress.bound_generation(conn, entry.consumer),
    )
    event_id = entry.event_id or skips.position_event_id(entry.stream, entry.position)
    skips.mark_position(conn, entry.consumer, entry.stream, entry.position, event_id)
    moved: dict[uuid.UUID, int] = {}
    if event is not None:
        moved = skips.set_aside_dependants(
            conn,
            entry.consumer,
            entry_id,
            aggregate_key(event),
            event.aggregate.revision,
            locked[entry.stream].generation,
        )
    position = progress.advance(
        conn,
        entry.consumer,
        entry.stream,
        locked[entry.stream].position,
        progress.Counts(ignored=1),
    )
    moved.update(skips.set_aside_blocker(conn, entry.consumer, entry.stream, position))
    return Skipped(position, moved)
