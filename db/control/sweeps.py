"""The control database's retention sweep, run by ``processors.sweeps``.

Every function takes an autocommit connection to the database, how long rows are
kept (``older_than_s``, by the database clock) and a batch size, and returns the
rows it deleted; each delete goes a bounded batch at a time (``db.batched_delete``).

It keeps ``process_instance`` and ``pause_ack`` rows of a process seen within
``older_than_s``, and its acknowledgements of pauses still open or resumed within
``older_than_s``.
"""

from __future__ import annotations

import psycopg

from db.batched_delete import PAST, drain


def gone_processes(conn: psycopg.Connection, older_than_s: float, batch: int) -> int:
    """1. the acknowledgements of processes not seen within ``older_than_s``, and of
    pauses resumed longer ago than that; 2. the processes' rows, each once none of its
    acknowledgements is left (a crash between 1 and 2 leaves rows 2 takes next pass)."""
    acks = drain(
        conn,
        "DELETE FROM pause_ack WHERE ctid IN (SELECT a.ctid FROM pause_ack a"
        " JOIN process_instance i ON i.instance_id = a.instance_id"
        f" WHERE i.seen_at < {PAST} LIMIT %(batch)s)",
        {"age": older_than_s},
        batch,
        what="acknowledgements of gone processes",
    )
    acks += drain(
        conn,
        "DELETE FROM pause_ack WHERE ctid IN (SELECT a.ctid FROM pause_ack a"
        " JOIN stream_pause p ON p.pause_id = a.pause_id"
        f" WHERE p.resumed_at < {PAST} LIMIT %(batch)s)",
        {"age": older_than_s},
        batch,
        what="acknowledgements of pauses resumed long ago",
    )
    return acks + drain(
        conn,
        "DELETE FROM process_instance WHERE instance_id IN (SELECT i.instance_id"
        f" FROM process_instance i WHERE i.seen_at < {PAST}"
        " AND NOT EXISTS (SELECT FROM pause_ack a WHERE a.instance_id = i.instance_id)"
        " LIMIT %(batch)s)",
        {"age": older_than_s},
        batch,
        what="gone processes",
    )
