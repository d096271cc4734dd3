"""Deleting what is past retention a bounded batch at a time.

A sweep's statement deletes at most ``%(batch)s`` rows; ``drain`` runs it again,
each batch its own short transaction, until one deletes fewer than a batch or the
pass has run ``max_batches`` of them (the rest waits for the next pass). So no
sweep holds locks or an open transaction for long, and a pass over a large
backlog takes a bounded time. A crash between batches leaves the rows of later
batches in place for the next pass: every statement picks what is past retention
afresh, so nothing is deleted twice or skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import psycopg

log = logging.getLogger(__name__)

MAX_BATCHES = 100

# The cut-off of a sweep's statement: ``%(age)s`` seconds before now, by the database clock.
PAST = "clock_timestamp() - make_interval(secs => %(age)s)"
"""Batches one pass of one sweep runs at most."""


def drain(
    conn: psycopg.Connection,
    sql: str,
    params: Mapping[str, object],
    batch: int,
    *,
    what: str,
    max_batches: int | None = None,
) -> int:
    """Run ``sql`` (a DELETE of at most ``%(batch)s`` rows; ``params`` gives the
    rest) batch after batch on an autocommit connection, at most ``max_batches``
    (default ``MAX_BATCHES``) times; returns the rows deleted."""
    if not conn.autocommit:
        raise ValueError("drain commits each batch on its own: give it an autocommit connection")
    deleted = 0
    for _ in range(max_batches or MAX_BATCHES):
        with conn.transaction():
            count = conn.execute(sql, {**params, "batch": batch}).rowcount
        deleted += count
        if count < batch:
            break
    else:
        log.info("%s: %d deleted, more left for the next pass", what, deleted)
        return deleted
    if deleted:
        log.info("%s: %d deleted", what, deleted)
    return deleted
