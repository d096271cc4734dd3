"""The operator's repair path for quarantined messages: list, retry, skip.

Progress never passes a quarantined event on its own. An operator either retries it
(after fixing whatever made it fail) or skips it with a reason; both are recorded on
the quarantine row, so the decision stays auditable.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import psycopg

from processors.applier import progress
from processors.applier.batch import Applier
from processors.applier.exceptions import EntryNotFound, EntryNotOpen, SkipReasonRequired
from processors.applier.messages import RawMessage


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

    1. read the entry (it must be open);
    2. apply its message through the normal batch path (its own transaction);
    3. if that left the event with an outcome in the inbox, mark the entry retried.
    A crash between 2 and 3 leaves the entry open although its event applied; a
    second retry then finds the event a duplicate and marks the entry retried.
    Returns False (entry stays open) when the message still fails.
    """
    with psycopg.connect(product_dsn) as conn:
        entry, message = _load(conn, entry_id)
    applier.apply([message])
    with psycopg.connect(product_dsn) as conn:
        decided = (
            entry.event_id is not None
            and conn.execute(
                "SELECT 1 FROM inbox WHERE event_id = %s", (entry.event_id,)
            ).fetchone()
        )
        if not decided:
            return False
        conn.execute(
            "UPDATE quarantine SET status = 'retried', resolved_at = now(), resolution = %s"
            " WHERE id = %s AND status = 'open'",
            (f"retried by {actor}", entry_id),
        )
    return True


def skip(product_dsn: str, entry_id: int, reason: str, actor: str) -> int | None:
    """Give up on an entry with an audited reason; returns the stream's new progress.

    In one transaction: mark the entry skipped, record its event as ``skipped`` in
    the inbox (a terminal outcome, so progress may pass its position) and advance
    the stream's progress. An entry without an event identity (it never decoded) is
    only marked: its position is filled from the resolver's retained events instead.
    """
    if not reason.strip():
        raise SkipReasonRequired("a skip needs a reason (--reason)")
    with psycopg.connect(product_dsn) as conn:
        entry, _ = _load(conn, entry_id)
        conn.execute(
            "UPDATE quarantine SET status = 'skipped', resolved_at = now(), resolution = %s"
            " WHERE id = %s",
            (f"skipped by {actor}: {reason.strip()}", entry_id),
        )
        if entry.event_id is None or entry.stream is None or entry.position is None:
            return None
        locked = progress.lock(conn, entry.consumer, [entry.stream])
        conn.execute(
            "INSERT INTO inbox (event_id, tenant_id, catalog_id, history_epoch, position,"
            " event_type, outcome) VALUES (%s, %s, %s, %s, %s, 'unknown', 'skipped')"
            " ON CONFLICT (event_id) DO NOTHING",
            (entry.event_id, *entry.stream, entry.position),
        )
        return progress.advance(
            conn,
            entry.consumer,
            entry.stream,
            locked[entry.stream].position,
            progress.Counts(ignored=1),
        )
