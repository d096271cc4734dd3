"""The inbox: one row per event id ever received, with the event's outcome."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

import psycopg

from schemas.events import Envelope


def known(conn: psycopg.Connection, event_ids: Iterable[uuid.UUID]) -> set[uuid.UUID]:
    """The ids already in the inbox: redeliveries, which are absorbed as duplicates."""
    ids = list(event_ids)
    if not ids:
        return set()
    rows = conn.execute("SELECT event_id FROM inbox WHERE event_id = ANY(%s)", (ids,)).fetchall()
    return {r[0] for r in rows}


def record(conn: psycopg.Connection, decided: Iterable[tuple[Envelope, str]]) -> None:
    """Insert new events with their outcome.

    ON CONFLICT DO NOTHING is the dedupe of last resort; callers hold the stream's
    progress lock, so no other applier inserts the same stream's events meanwhile.
    """
    rows = [
        (
            e.event_id,
            e.tenant_id,
            e.catalog_id,
            e.history_epoch,
            e.position,
            e.event_type,
            outcome,
        )
        for e, outcome in decided
    ]
    if not rows:
        return
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO inbox (event_id, tenant_id, catalog_id, history_epoch, position,"
            " event_type, outcome) VALUES (%s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (event_id) DO NOTHING",
            rows,
        )


def set_outcomes(conn: psycopg.Connection, outcomes: Mapping[uuid.UUID, str]) -> None:
    """Record the final outcome of parked events released in this batch."""
    if not outcomes:
        return
    with conn.cursor() as cur:
        cur.executemany(
            "UPDATE inbox SET outcome = %s, decided_at = now() WHERE event_id = %s",
            [(outcome, event_id) for event_id, outcome in outcomes.items()],
        )
