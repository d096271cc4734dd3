"""The resolver database's retention sweeps: what each table keeps, and the deletes of
the rest, run by ``producers.retention.service`` and ``producers.exports.retention``.

Every function takes an autocommit connection to the database, how long rows are
kept (``older_than_s``, by the database clock) and a batch size, and returns the
rows it deleted; each delete goes a bounded batch at a time (``db.batched_delete``).

What each keeps:

* ``snapshot_export``: every row not ``deleted``; a ``deleted`` one (its objects went
  first) for ``older_than_s`` from its deletion;
* ``rebuild_lease``: live leases; a released or expired one for ``older_than_s`` from
  its release or expiry, and while an export row names it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import psycopg

from db.batched_delete import PAST, drain


def deleted_exports(conn: psycopg.Connection, older_than_s: float, batch: int) -> int:
    return drain(
        conn,
        "DELETE FROM snapshot_export WHERE export_id IN (SELECT export_id FROM snapshot_export"
        f" WHERE status = 'deleted' AND deleted_at < {PAST} LIMIT %(batch)s)",
        {"age": older_than_s},
        batch,
        what="deleted export rows",
    )


def ended_leases(conn: psycopg.Connection, older_than_s: float, batch: int) -> int:
    """Released or expired leases past retention that no export row names. An expired
    lease is never renewed again (``producers.retention.leases``), so it is ended
    whether or not its holder released it."""
    return drain(
        conn,
        "DELETE FROM rebuild_lease WHERE lease_id IN (SELECT l.lease_id FROM rebuild_lease l"
        f" WHERE coalesce(l.released_at, l.expires_at) < {PAST}"
        " AND NOT EXISTS (SELECT FROM snapshot_export e WHERE e.lease_id = l.lease_id)"
        " LIMIT %(batch)s)",
        {"age": older_than_s},
        batch,
        what="ended rebuild leases",
    )


def kept_exports(conn: psycopg.Connection, export_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Which of ``export_ids`` have a row not ``deleted``: their objects are wanted."""
    rows = conn.execute(
        "SELECT export_id FROM snapshot_export WHERE export_id = ANY(%s) AND status <> 'deleted'",
        (list(export_ids),),
    ).fetchall()
    return {r[0] for r in rows}
