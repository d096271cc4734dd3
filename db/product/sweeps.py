"""The product database's retention sweeps: what each table keeps, and the deletes of
the rest, run by ``processors.sweeps``.

Every function takes an autocommit connection to the database, how long rows are
kept (``older_than_s``, by the database clock) and a batch size, and returns the
rows it deleted; each delete goes a bounded batch at a time (``db.batched_delete``).

What each keeps:

* ``rebuild``: unfinished rebuilds and those not yet cleaned up; a finished one for
  ``older_than_s`` from its end; always the newest done rebuild of each consumer and
  catalog (``gapless fence-epoch`` reads it to find a fence complete) and the rebuild
  naming the catalog's highest generation (``db.product.rebuilds.next_generation``
  never hands a number out twice);
* ``control_answer``: for ``older_than_s`` from the answer;
* ``quarantine``: open entries; a resolved one (retried, superseded or skipped) for
  ``older_than_s`` from its resolution, except a skipped one naming its aggregate,
  which later events of that aggregate are checked against for as long as it lives
  (``processors.applier.skips``): kept.
"""

from __future__ import annotations

import psycopg

from db.batched_delete import PAST, drain


def finished_rebuilds(conn: psycopg.Connection, older_than_s: float, batch: int) -> int:
    return drain(
        conn,
        "DELETE FROM rebuild WHERE rebuild_id IN (SELECT r.rebuild_id FROM rebuild r"
        " WHERE r.phase IN ('done', 'failed', 'cancelled') AND r.cleaned_at IS NOT NULL"
        f" AND r.finished_at < {PAST}"
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
        f" WHERE answered_at < {PAST} LIMIT %(batch)s)",
        {"age": older_than_s},
        batch,
        what="control answers",
    )


def resolved_quarantine(conn: psycopg.Connection, older_than_s: float, batch: int) -> int:
    return drain(
        conn,
        "DELETE FROM quarantine WHERE id IN (SELECT id FROM quarantine"
        f" WHERE status <> 'open' AND resolved_at < {PAST}"
        " AND (status <> 'skipped' OR aggregate_type IS NULL)"
        " ORDER BY resolved_at LIMIT %(batch)s)",
        {"age": older_than_s},
        batch,
        what="resolved quarantine entries",
    )
