"""The inbox: one row per consumer and event id it received, with the event's outcome
for that consumer (a shadow rebuild's consumer has its own).

Each function here is one statement however many events it handles: the rows go to
the server as binary arrays (``%b``) and ``unnest`` turns them back into rows.
``executemany`` would execute one statement per event.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

import psycopg

from schemas.events import Envelope


def known(
    conn: psycopg.Connection, consumer: str, event_ids: Iterable[uuid.UUID]
) -> set[uuid.UUID]:
    """The ids already in this consumer's inbox: redeliveries, absorbed as duplicates."""
    ids = list(event_ids)
    if not ids:
        return set()
    rows = conn.execute(
        "SELECT event_id FROM inbox WHERE consumer = %b AND event_id = ANY(%b::uuid[])",
        (consumer, ids),
    ).fetchall()
    return {r[0] for r in rows}


def holders(
    conn: psycopg.Connection,
    consumer: str,
    positions: Iterable[tuple[tuple[str, str, int], int]],
) -> dict[tuple[tuple[str, str, int], int], set[uuid.UUID]]:
    """The event ids this consumer's inbox holds at each (stream, position) asked for
    (absent: no row, never received or pruned). A stream's positions are unique in
    the resolver's history, so a second id at one position means that history went
    back (``processors.applier.rewound``)."""
    wanted = sorted(set(positions))
    if not wanted:
        return {}
    rows = conn.execute(
        "SELECT i.tenant_id, i.catalog_id, i.history_epoch, i.position, i.event_id FROM inbox i"
        " JOIN unnest(%b::text[], %b::text[], %b::int8[], %b::int8[]) AS k(t, c, e, p)"
        " ON i.tenant_id = k.t AND i.catalog_id = k.c AND i.history_epoch = k.e"
        " AND i.position = k.p WHERE i.consumer = %b",
        (
            [s[0] for s, _ in wanted],
            [s[1] for s, _ in wanted],
            [s[2] for s, _ in wanted],
            [p for _, p in wanted],
            consumer,
        ),
    ).fetchall()
    found: dict[tuple[tuple[str, str, int], int], set[uuid.UUID]] = {}
    for t, c, e, position, event_id in rows:
        found.setdefault(((t, c, int(e)), int(position)), set()).add(event_id)
    return found


def record(
    conn: psycopg.Connection,
    decided: Iterable[tuple[Envelope, str]],
    consumer: str,
    supersede: bool = False,
) -> None:
    """Insert new events with their outcome.

    ON CONFLICT DO NOTHING is the dedupe of last resort; callers hold the stream's
    progress lock, so no other applier inserts the same stream's events meanwhile.

    With ``supersede``, the same statement also closes this consumer's open quarantine
    entries of the events it just gave a terminal outcome: another copy of them (the
    resolver's retained one, fetched by the gap closer) got through, so they end
    ``superseded``. An event quarantined because it failed has no inbox row (one the
    applier set aside itself has the non-terminal outcome ``quarantined``), so only
    events new to the inbox can have one; doing it here costs no extra round trip.
    """
    rows = [
        (
            consumer,
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
    insert = (
        "INSERT INTO inbox (consumer, event_id, tenant_id, catalog_id, history_epoch,"
        " position, event_type, outcome)"
        " SELECT * FROM unnest(%b::text[], %b::uuid[], %b::text[], %b::text[], %b::int8[],"
        " %b::int8[], %b::text[], %b::text[])"
        " ON CONFLICT (consumer, event_id) DO NOTHING"
    )
    columns: list[object] = [list(column) for column in zip(*rows, strict=True)]
    if not supersede:
        conn.execute(insert, columns)
        return
    conn.execute(
        f"WITH new AS ({insert} RETURNING event_id, outcome)"
        " UPDATE quarantine SET status = 'superseded', resolved_at = now(),"
        " resolution = 'superseded: the event was applied from another copy'"
        " WHERE consumer = %b AND status = 'open'"
        " AND event_id IN (SELECT event_id FROM new"
        "  WHERE outcome NOT IN ('parked', 'quarantined'))",
        [*columns, consumer],
    )


def set_outcomes(
    conn: psycopg.Connection, consumer: str, outcomes: Mapping[uuid.UUID, str]
) -> None:
    """Record the final outcome of parked events released in this batch."""
    if not outcomes:
        return
    conn.execute(
        "UPDATE inbox SET outcome = k.outcome, decided_at = now()"
        " FROM unnest(%b::uuid[], %b::text[]) AS k(event_id, outcome)"
        " WHERE inbox.consumer = %b AND inbox.event_id = k.event_id",
        (list(outcomes.keys()), list(outcomes.values()), consumer),
    )
