"""The retention sweeps' SQL: what each table keeps, and the bounded deletes of the
rest (``db.batched_delete``), for the three databases.

Every function takes an autocommit connection to its database, how long rows are
kept (``older_than_s``, by the database clock) and a batch size, and returns the
rows it deleted. The processes that own each database run them
(``producers.retention.service`` and ``producers.exports.retention`` on the
resolver, ``processors.sweeps`` on the product and control databases).

What each keeps:

* resolver ``snapshot_export``: every row not ``deleted``; a ``deleted`` one (its
  objects went first) for ``older_than_s`` from its deletion;
* resolver ``rebuild_lease``: live leases; a released or expired one for
  ``older_than_s`` from its release or expiry, and while an export row names it;
* product ``rebuild``: unfinished rebuilds and those not yet cleaned up; a finished
  one for ``older_than_s`` from its end; always the newest done rebuild of each
  consumer and catalog (``gapless fence-epoch`` reads it to find a fence complete)
  and the rebuild naming the catalog's highest generation
  (``db.rebuilds.next_generation`` never hands a number out twice);
* product ``control_answer``: for ``older_than_s`` from the answer;
* product ``quarantine``: open entries; a resolved one (retried, superseded or
  skipped) for ``older_than_s`` from its resolution, except a skipped one naming
  its aggregate, which later events of that aggregate are checked against for as
  long as it lives (``processors.applier.skips``): kept;
* control ``process_instance`` and ``pause_ack``: a process seen within
  ``older_than_s``, its acknowledgements of pauses still open or resumed within
  ``older_than_s``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import psycopg

from db.batched_delete import drain

_PAST = "clock_timestamp() - make_interval(secs => %(age)s)"


# Resolver ----------------------------------------------------------------------------


def deleted_exports(conn: psycopg.Connection, older_than_s: float, batch: int) -> int:
    return drain(
        conn,
        "DELETE FROM snapshot_export WHERE export_id IN (SELECT export_id FROM snapshot_export"
        f" WHERE status = 'deleted' AND deleted_at < {_PAST} LIMIT %(batch)s)",
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
        f" WHERE coalesce(l.released_at, l.expires_at) < {_PAST}"
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


# Product -----------------------------------------------------------------------------


def finished_rebuilds(conn: psycopg.Connection, older_than_s: float, batch: int) -> int:
    return drain(
        conn,
        "DELETE FROM rebuild WHERE rebuild_id IN (SELECT r.rebuild_id FROM rebuild r"
        " WHERE r.phase IN ('done', 'failed', 'cancelled') AND r.cleaned_at IS NOT NULL"
        f" AND r.finished_at < {_PAST}"
        # the newest done rebuild of each consumer and catalog stays
        " AND (r.phase <> 'done' OR EXISTS (SELECT FROM rebuild n"
        "  WHERE n.consumer = r.consumer AND n.tenant_id = r.tenant_id"
        "  AND n.catalog_id = r.catalog_id AND n.phase = 'done'"
        "  AND n.finished_at > r.finished_at))"
        # so does the one naming the catalog's highest generation
        " AND (r.generation IS NULL OR r.generation < (SELECT max(g.generation)"
        "  FROM rebuild g WHERE g.tenant_id = r.tenant_id AND g.catalog_id = r.catalog_id))"
        " LIMIT %(batch)s)",
        {"age": older_than_s},
        batch,
        what="finished rebuilds",
    )


def control_answers(conn: psycopg.Connection, older_than_s: float, batch: int) -> int:
    return drain(
        conn,
        "DELETE FROM control_answer WHERE command_id IN (SELECT command_id FROM control_answer"
        f" WHERE answered_at < {_PAST} LIMIT %(batch)s)",
        {"age": older_than_s},
        batch,
        what="control answers",
    )


def resolved_quarantine(conn: psycopg.Connection, older_than_s: float, batch: int) -> int:
    return drain(
        conn,
        "DELETE FROM quarantine WHERE id IN (SELECT id FROM quarantine"
        f" WHERE status <> 'open' AND resolved_at < {_PAST}"
        " AND (status <> 'skipped' OR aggregate_type IS NULL)"
        " ORDER BY resolved_at LIMIT %(batch)s)",
        {"age": older_than_s},
        batch,
        what="resolved quarantine entries",
    )


# Control -----------------------------------------------------------------------------


def gone_processes(conn: psycopg.Connection, older_than_s: float, batch: int) -> int:
    """1. the acknowledgements of processes not seen within ``older_than_s``, and of
    pauses resumed longer ago than that; 2. the processes' rows, each once none of its
    acknowledgements is left (a crash between 1 and 2 leaves rows 2 takes next pass)."""
    acks = drain(
        conn,
        "DELETE FROM pause_ack WHERE ctid IN (SELECT a.ctid FROM pause_ack a"
        " JOIN process_instance i ON i.instance_id = a.instance_id"
        f" WHERE i.seen_at < {_PAST} LIMIT %(batch)s)",
        {"age": older_than_s},
        batch,
        what="acknowledgements of gone processes",
    )
    acks += drain(
        conn,
        "DELETE FROM pause_ack WHERE ctid IN (SELECT a.ctid FROM pause_ack a"
        " JOIN stream_pause p ON p.pause_id = a.pause_id"
        f" WHERE p.resumed_at < {_PAST} LIMIT %(batch)s)",
        {"age": older_than_s},
        batch,
        what="acknowledgements of pauses resumed long ago",
    )
    return acks + drain(
        conn,
        "DELETE FROM process_instance WHERE instance_id IN (SELECT i.instance_id"
        f" FROM process_instance i WHERE i.seen_at < {_PAST}"
        " AND NOT EXISTS (SELECT FROM pause_ack a WHERE a.instance_id = i.instance_id)"
        " LIMIT %(batch)s)",
        {"age": older_than_s},
        batch,
        what="gone processes",
    )
