"""Durable contiguous progress per consumer and stream, in the product database.

Progress P means every position <= P of the stream has a terminal outcome in the
inbox (applied or ignored). Kafka offsets play no part: after any crash, restart or
rebalance, P says exactly what is done.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import psycopg

Stream = tuple[str, str, int]


@dataclass(frozen=True, slots=True)
class StreamProgress:
    position: int
    generation: int


@dataclass(slots=True)
class Counts:
    applied: int = 0
    duplicates: int = 0
    parked: int = 0
    released: int = 0
    ignored: int = 0


def lock(
    conn: psycopg.Connection, consumer: str, streams: Iterable[Stream]
) -> dict[Stream, StreamProgress]:
    """Lock this consumer's progress rows of ``streams``, creating missing ones.

    The row lock serializes appliers of one stream: during a rebalance two workers
    can briefly hold the same partition, and without the lock both could judge the
    same event new. Rows are locked in sorted order so two appliers cannot deadlock.
    """
    wanted = sorted(set(streams))
    result: dict[Stream, StreamProgress] = {}
    if not wanted:
        return result
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO stream_progress (consumer, tenant_id, catalog_id, history_epoch)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
            [(consumer, *s) for s in wanted],
        )
    for stream in wanted:
        row = conn.execute(
            "SELECT position, generation FROM stream_progress WHERE consumer = %s"
            " AND tenant_id = %s AND catalog_id = %s AND history_epoch = %s FOR UPDATE",
            (consumer, *stream),
        ).fetchone()
        assert row is not None
        result[stream] = StreamProgress(int(row[0]), int(row[1]))
    return result


def contiguous_end(conn: psycopg.Connection, stream: Stream, position: int) -> int:
    """The greatest P >= ``position`` such that every position in (position, P] is terminal.

    Numbering the terminal positions above ``position`` 1, 2, 3…, a position belongs
    to the contiguous run exactly when position - row_number = ``position``.
    """
    row = conn.execute(
        "SELECT max(p) FROM ("
        " SELECT p, p - row_number() OVER (ORDER BY p) AS shift FROM ("
        "  SELECT DISTINCT position AS p FROM inbox"
        "  WHERE tenant_id = %s AND catalog_id = %s AND history_epoch = %s"
        "  AND position > %s AND outcome <> 'parked') terminal"
        ") numbered WHERE shift = %s",
        (*stream, position, position),
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else position


def advance(
    conn: psycopg.Connection, consumer: str, stream: Stream, current: int, counts: Counts
) -> int:
    """Move progress to the end of the contiguous run and add the batch's counts.

    ``GREATEST`` keeps progress from ever moving backwards, whatever the caller read.
    """
    new = contiguous_end(conn, stream, current)
    conn.execute(
        "UPDATE stream_progress SET position = GREATEST(position, %s),"
        " applied_count = applied_count + %s, duplicate_count = duplicate_count + %s,"
        " parked_count = parked_count + %s, released_count = released_count + %s,"
        " ignored_count = ignored_count + %s, updated_at = now()"
        " WHERE consumer = %s AND tenant_id = %s AND catalog_id = %s AND history_epoch = %s",
        (
            new,
            counts.applied,
            counts.duplicates,
            counts.parked,
            counts.released,
            counts.ignored,
            consumer,
            *stream,
        ),
    )
    return new
