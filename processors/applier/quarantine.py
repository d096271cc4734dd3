"""Quarantine: messages that cannot be decoded or applied, kept whole for operators."""

from __future__ import annotations

import psycopg

from processors.applier.messages import RawMessage
from schemas.events import Envelope

_MAX_DETAIL = 2000


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
    index and is not stored twice.
    """
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
            event.tenant_id if event else None,
            event.catalog_id if event else None,
            event.history_epoch if event else None,
            event.position if event else None,
            error_code,
            sanitize(detail),
        ),
    )
    return cur.rowcount == 1
