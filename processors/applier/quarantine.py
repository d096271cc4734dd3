"""Quarantine: messages that cannot be decoded or applied, kept whole for operators."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from processors.applier.messages import RawMessage
from schemas.events import Envelope

_MAX_DETAIL = 2000

# Error codes of entries the applier sets aside itself (the rest are codec codes,
# ``APPLY_FAILED[_<sqlstate>]`` and ``EPOCH_UNKNOWN``).
DEPENDENCY_SKIPPED = "DEPENDENCY_SKIPPED"
DEPENDENCY_NOT_APPLIED = "DEPENDENCY_NOT_APPLIED"


def sanitize(detail: str) -> str:
    """Bound the error text; it is shown to operators and must not flood the table."""
    detail = detail.replace("\x00", "")
    return detail if len(detail) <= _MAX_DETAIL else detail[:_MAX_DETAIL] + "…"


def quarantine(
    conn: psycopg.Connection,
    consumer: str,
    message: RawMessage,
    error_code: str,
    detail: str,
    event: Envelope | None = None,
) -> bool:
    """Keep the message with its origin and error; returns False if already kept.

    A redelivered poison message hits the unique (consumer, topic, partition, offset)
    index and is not stored twice. Without a decoded ``event``, the stream and
    position the message's sender vouched for (a retained copy) are kept instead.
    """
    stream, position = message.stream, message.position
    if event is not None:
        stream, position = event.stream, event.position
    cur = conn.execute(
        'INSERT INTO quarantine (consumer, topic, partition, "offset", key, value,'
        " event_id, tenant_id, catalog_id, history_epoch, position, error_code,"
        " error_detail) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT DO NOTHING",
        (
            consumer,
            message.topic,
            message.partition,
            message.offset,
            message.key,
            message.value,
            event.event_id if event else None,
            *(stream if stream is not None else (None, None, None)),
            position,
            error_code,
            sanitize(detail),
        ),
    )
    return cur.rowcount == 1


def skipped_copy(conn: psycopg.Connection, consumer: str, value: bytes | None) -> int | None:
    """The skipped entry of ``consumer`` holding exactly these bytes, if any.

    An operator who skips an undecodable message gives up those bytes: another copy
    of them (the resolver's retained one, which the gap closer fetches) is the same
    message and is not put before the operator again. Only undecodable messages
    come here, so the scan is of a rare path.
    """
    if value is None:
        return None
    row = conn.execute(
        "SELECT min(id) FROM quarantine WHERE consumer = %s AND status = 'skipped'"
        " AND event_id IS NULL AND value = %s",
        (consumer, value),
    ).fetchone()
    return int(row[0]) if row is not None and row[0] is not None else None


def keep_skipped(
    conn: psycopg.Connection,
    consumer: str,
    message: RawMessage,
    error_code: str,
    detail: str,
    skipped_entry: int,
) -> bool:
    """Store a copy of an already skipped message as skipped itself, naming the entry
    whose skip it follows (an audit line, never an open entry)."""
    cur = conn.execute(
        'INSERT INTO quarantine (consumer, topic, partition, "offset", key, value,'
        " tenant_id, catalog_id, history_epoch, position, error_code, error_detail,"
        " status, resolved_at, resolution)"
        " SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 'skipped', now(),"
        " 'skipped: the same message as entry ' || s.id || ', ' || s.resolution"
        " FROM quarantine s WHERE s.id = %s ON CONFLICT DO NOTHING",
        (
            consumer,
            message.topic,
            message.partition,
            message.offset,
            message.key,
            message.value,
            *(message.stream if message.stream is not None else (None, None, None)),
            message.position,
            error_code,
            sanitize(detail),
            skipped_entry,
        ),
    )
    return cur.rowcount == 1


@dataclass(frozen=True, slots=True)
class SetAside:
    """A parked event to move into quarantine, and why."""

    event_id: uuid.UUID
    error_code: str
    detail: str


def set_aside(
    conn: psycopg.Connection, consumer: str, events: Sequence[SetAside]
) -> dict[uuid.UUID, int]:
    """Move parked events into quarantine; returns each one's entry id.

    One statement: the parked rows and their dependencies go, their inbox rows turn
    ``quarantined`` (not terminal; another copy is a duplicate), and a quarantine
    entry takes the stored message under the origin it was parked from (rows parked
    before that was kept get ``parked/<stream>``, partition -1, offset = position).
    A retry clears the inbox row and applies the message as new. If that origin
    already has an entry (retried earlier, then parked again), the entry is opened
    again with the new error.
    """
    if not events:
        return {}
    rows = conn.execute(
        "WITH moved AS ("
        " DELETE FROM parked_event pe USING unnest(%b::uuid[], %b::text[], %b::text[])"
        "  AS k(event_id, code, detail) WHERE pe.consumer = %b AND pe.event_id = k.event_id"
        "  RETURNING pe.*, k.code, k.detail),"
        " dependencies AS (DELETE FROM parked_dependency d USING moved m"
        "  WHERE d.consumer = m.consumer AND d.event_id = m.event_id),"
        " held AS (UPDATE inbox i SET outcome = 'quarantined', decided_at = now() FROM moved m"
        "  WHERE i.consumer = m.consumer AND i.event_id = m.event_id AND i.outcome = 'parked')"
        ' INSERT INTO quarantine (consumer, topic, partition, "offset", value, event_id,'
        " tenant_id, catalog_id, history_epoch, position, error_code, error_detail)"
        " SELECT m.consumer, coalesce(m.topic, 'parked/' || m.tenant_id || '/' || m.catalog_id"
        " || '/' || m.history_epoch), coalesce(m.partition, -1),"
        ' coalesce(m."offset", m.position), m.value, m.event_id, m.tenant_id,'
        " m.catalog_id, m.history_epoch, m.position, m.code, m.detail FROM moved m"
        ' ON CONFLICT (consumer, topic, partition, "offset") DO UPDATE'
        " SET status = 'open', resolved_at = NULL, resolution = NULL,"
        " error_code = excluded.error_code,"
        " error_detail = excluded.error_detail || CASE WHEN quarantine.status = 'open'"
        " THEN '' ELSE ' (opened again; it was ' || quarantine.status || ': '"
        " || coalesce(quarantine.resolution, '-') || ')' END"
        " RETURNING event_id, id",
        [
            [e.event_id for e in events],
            [e.error_code for e in events],
            [sanitize(e.detail) for e in events],
            consumer,
        ],
    ).fetchall()
    return {r[0]: int(r[1]) for r in rows}
