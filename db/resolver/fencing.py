"""Fencing a restored history: the streams of a catalog's older
epochs take no more writes and have nothing more published.

The control database is the only authority on the current epoch; the fence records
its decision on the resolver side so the writers and the relay can hold to it
without asking the control database on every write. One transaction per catalog:

1. for each stream of the catalog below the new epoch, in stream order: take the
   relay's claim on it (``pg_advisory_xact_lock``, blocking: waits for a relay
   batch in flight, the relay's Kafka send included, to finish and record its
   published position), then mark its cursor row fenced (the UPDATE waits for a
   writer holding the row lock, whose COMMIT then lands before the fence);
2. COMMIT: from here every writer that locks one of those rows finds the mark and
   writes nothing (``StreamFenced``), and the relay, which checks the mark under its
   claim, publishes none of their rows.

A crash before COMMIT leaves nothing fenced (the claims and row locks go with the
connection); running it again is harmless (a fenced row keeps its first mark).
Nothing is relabelled or deleted: the old epochs' rows stay as history.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from db.resolver.outbox import claim_key
from schemas.ids import StreamId


@dataclass(frozen=True, slots=True)
class Fenced:
    stream: StreamId
    position: int
    """The stream's committed cursor when it was fenced: its history ends there."""
    published: int
    """What the relay had published of it: rows above stay unpublished, as history."""


def fence_older_epochs(
    conn: psycopg.Connection, tenant_id: str, catalog_id: str, new_epoch: int
) -> list[Fenced]:
    """Steps 1-2 for one catalog, in the caller's transaction (it commits)."""
    rows = conn.execute(
        "SELECT history_epoch FROM stream_cursor WHERE tenant_id = %s AND catalog_id = %s"
        " AND history_epoch < %s AND fenced_at IS NULL ORDER BY history_epoch",
        (tenant_id, catalog_id, new_epoch),
    ).fetchall()
    fenced: list[Fenced] = []
    for (epoch,) in rows:
        stream = StreamId(tenant_id, catalog_id, int(epoch))
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (claim_key(stream),))
        row = conn.execute(
            "UPDATE stream_cursor c SET fenced_at = clock_timestamp(), fenced_for_epoch = %s"
            " WHERE c.tenant_id = %s AND c.catalog_id = %s AND c.history_epoch = %s"
            " AND c.fenced_at IS NULL RETURNING c.position, coalesce((SELECT"
            " p.published_position FROM stream_publication p WHERE p.tenant_id = c.tenant_id"
            " AND p.catalog_id = c.catalog_id AND p.history_epoch = c.history_epoch), 0)",
            (new_epoch, *stream),
        ).fetchone()
        if row is not None:
            fenced.append(Fenced(stream, int(row[0]), int(row[1])))
    return fenced


def is_fenced(conn: psycopg.Connection, stream: StreamId) -> bool:
    row = conn.execute(
        "SELECT fenced_at IS NOT NULL FROM stream_cursor WHERE tenant_id = %s"
        " AND catalog_id = %s AND history_epoch = %s",
        tuple(stream),
    ).fetchone()
    return bool(row and row[0])


@dataclass(frozen=True, slots=True)
class Settled:
    parked: int
    quarantined: int


def settle_old_epochs(
    conn: psycopg.Connection, consumer: str, tenant_id: str, catalog_id: str, epoch: int
) -> Settled:
    """Product database, the caller's transaction: what ``consumer`` still holds open
    of the catalog's epochs below ``epoch``. Parked events get the audited terminal
    outcome ``ignored_old_epoch`` and leave parking; open quarantine entries become
    ``superseded``. Nothing of an old epoch is ever applied after the fence. The
    settlement is recorded once per catalog and epoch (``superseded_epoch``, the
    first time kept): the old epochs' rows are history from then on
    (``db.product.inbox_pruning``)."""
    conn.execute(
        "INSERT INTO superseded_epoch (tenant_id, catalog_id, epoch) VALUES (%s, %s, %s)"
        " ON CONFLICT DO NOTHING",
        (tenant_id, catalog_id, epoch),
    )
    parked = conn.execute(
        "WITH gone AS (DELETE FROM parked_event WHERE consumer = %(c)s AND tenant_id = %(t)s"
        "  AND catalog_id = %(k)s AND history_epoch < %(e)s RETURNING event_id),"
        " deps AS (DELETE FROM parked_dependency d USING gone"
        "  WHERE d.consumer = %(c)s AND d.event_id = gone.event_id),"
        " outcome AS (UPDATE inbox i SET outcome = 'ignored_old_epoch', decided_at = now()"
        "  FROM gone WHERE i.consumer = %(c)s AND i.event_id = gone.event_id)"
        " SELECT count(*) FROM gone",
        {"c": consumer, "t": tenant_id, "k": catalog_id, "e": epoch},
    ).fetchone()
    quarantined = conn.execute(
        "UPDATE quarantine SET status = 'superseded', resolved_at = now(),"
        " resolution = %s WHERE consumer = %s AND tenant_id = %s AND catalog_id = %s"
        " AND history_epoch < %s AND status = 'open'",
        (f"epoch fenced: {epoch} is current", consumer, tenant_id, catalog_id, epoch),
    ).rowcount
    return Settled(int(parked[0]) if parked else 0, quarantined)
