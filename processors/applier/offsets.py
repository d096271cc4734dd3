"""Resume offsets kept in the product database, in the applier's transaction."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import psycopg

from processors.applier.messages import RawMessage


def contiguous_runs(messages: Iterable[RawMessage]) -> dict[tuple[str, int], tuple[int, int]]:
    """Per partition, the first and last offset of the batch's leading contiguous run.

    Offsets after a hole are left out: the hole may be a message the agent never
    received, so the resume offset must not pass it.
    """
    offsets: dict[tuple[str, int], list[int]] = defaultdict(list)
    for m in messages:
        if m.partition >= 0:  # not Kafka (e.g. retained events fetched from the resolver)
            offsets[(m.topic, m.partition)].append(m.offset)
    runs: dict[tuple[str, int], tuple[int, int]] = {}
    for tp, found in offsets.items():
        ordered = sorted(set(found))
        end = ordered[0]
        for offset in ordered[1:]:
            if offset != end + 1:
                break
            end = offset
        runs[tp] = (ordered[0], end)
    return runs


def record(conn: psycopg.Connection, consumer: str, messages: Iterable[RawMessage]) -> None:
    """Move each partition's resume offset past this batch, if the batch continues it.

    A partition seen for the first time starts at the batch. Afterwards the offset
    only moves when the batch starts at or before it (no hole) and ends beyond it.
    One statement for all partitions. ``excluded`` only carries the table's columns,
    so the condition looks up the run's first offset in the arrays again.
    """
    runs = contiguous_runs(messages)
    if not runs:
        return
    conn.execute(
        "INSERT INTO consumer_offset (consumer, topic, partition, next_offset)"
        " SELECT %(consumer)s, r.topic, r.partition, r.next_offset"
        " FROM unnest(%(topics)b::text[], %(partitions)b::int4[], %(nexts)b::int8[])"
        " AS r(topic, partition, next_offset)"
        " ON CONFLICT (consumer, topic, partition) DO UPDATE"
        " SET next_offset = excluded.next_offset, updated_at = now()"
        " WHERE consumer_offset.next_offset < excluded.next_offset"
        " AND consumer_offset.next_offset >= ("
        "  SELECT f.first FROM unnest(%(topics)b::text[], %(partitions)b::int4[],"
        "  %(firsts)b::int8[]) AS f(topic, partition, first)"
        "  WHERE f.topic = excluded.topic AND f.partition = excluded.partition)",
        {
            "consumer": consumer,
            "topics": [topic for topic, _ in runs],
            "partitions": [partition for _, partition in runs],
            "nexts": [last + 1 for _, last in runs.values()],
            "firsts": [first for first, _ in runs.values()],
        },
    )


def load(conn: psycopg.Connection, consumer: str, topic: str) -> dict[int, int]:
    rows = conn.execute(
        "SELECT partition, next_offset FROM consumer_offset WHERE consumer = %s AND topic = %s",
        (consumer, topic),
    ).fetchall()
    return {int(p): int(o) for p, o in rows}
